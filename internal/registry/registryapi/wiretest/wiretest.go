package wiretest

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"
)

// Register bodies as real clients send them, then broken variants.
var InstanceJSONSeeds = []string{
	// Java Eureka client 1.10 (Jackson), Spring Cloud's metadata.
	`{"instance":{"instanceId":"orders-1:8080","hostName":"10.0.0.7","app":"ORDERS","ipAddr":"10.0.0.7","status":"UP","overriddenStatus":"UNKNOWN","port":{"$":8080,"@enabled":"true"},"securePort":{"$":443,"@enabled":"false"},"countryId":1,"dataCenterInfo":{"@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo","name":"MyOwn"},"leaseInfo":{"renewalIntervalInSecs":30,"durationInSecs":90,"registrationTimestamp":0,"lastRenewalTimestamp":0,"evictionTimestamp":0,"serviceUpTimestamp":0},"metadata":{"@class":"java.util.Collections$EmptyMap"},"homePageUrl":"http://10.0.0.7:8080/","statusPageUrl":"http://10.0.0.7:8080/actuator/info","healthCheckUrl":"http://10.0.0.7:8080/actuator/health","vipAddress":"orders","secureVipAddress":"orders","isCoordinatingDiscoveryServer":"false","lastUpdatedTimestamp":"1700000000000","lastDirtyTimestamp":"1700000000000"}}`,
	`{"instance":{"instanceId":"payments-7f9c:payments:8081","hostName":"payments-7f9c","app":"PAYMENTS","ipAddr":"10.0.3.12","status":"STARTING","overriddenStatus":"UNKNOWN","port":{"$":8081,"@enabled":"true"},"securePort":{"$":443,"@enabled":"false"},"countryId":1,"dataCenterInfo":{"@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo","name":"MyOwn"},"leaseInfo":{"renewalIntervalInSecs":5,"durationInSecs":15,"registrationTimestamp":0,"lastRenewalTimestamp":0,"evictionTimestamp":0,"serviceUpTimestamp":0},"metadata":{"management.port":"8081","zone":"eu-west-1a","version":"2.4.1"},"homePageUrl":"http://payments-7f9c:8081/","statusPageUrl":"http://payments-7f9c:8081/actuator/info","healthCheckUrl":"http://payments-7f9c:8081/actuator/health","vipAddress":"payments","secureVipAddress":"payments","isCoordinatingDiscoveryServer":"false","lastUpdatedTimestamp":"1700000000123","lastDirtyTimestamp":"1700000000100","actionType":"ADDED"}}`,
	// A shard of the shards app, asking for a slot.
	`{"instance":{"instanceId":"shard-c","hostName":"zeebe-2","app":"ZEEBE-SHARDS","ipAddr":"10.1.0.3","status":"UP","port":{"$":26500,"@enabled":"true"},"dataCenterInfo":{"@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo","name":"MyOwn"},"leaseInfo":{"renewalIntervalInSecs":10,"durationInSecs":30},"metadata":{"slot":"3","pool":"p1","metrics":"http://10.1.0.3:9600/metrics"},"vipAddress":"zeebe-shards"}}`,
	// hudl/fargo 1.4.0 (UseJson): ports and their flags as strings.
	`{"instance":{"instanceId":"orders-1","hostName":"orders-1.local","app":"ORDERS","ipAddr":"10.0.0.7","vipAddress":"orders","secureVipAddress":"orders-secure","status":"UP","overriddenstatus":"","homePageUrl":"","statusPageUrl":"","healthCheckUrl":"","countryId":0,"dataCenterInfo":{"name":"MyOwn","@class":"com.netflix.appinfo.MyDataCenterInfo"},"leaseInfo":{"renewalIntervalInSecs":10,"durationInSecs":30,"registrationTimestamp":0,"lastRenewalTimestamp":0,"evictionTimestamp":0,"serviceUpTimestamp":0},"metadata":{"zone":"a"},"port":{"$":"8080","@enabled":"true"},"securePort":{"$":"8443","@enabled":"false"}}}`,
	`{"instance":{"instanceId":"","hostName":"h","app":"A","ipAddr":"1.2.3.4","vipAddress":"","secureVipAddress":"","status":"","overriddenstatus":"","homePageUrl":"","statusPageUrl":"","healthCheckUrl":"","countryId":0,"dataCenterInfo":{"name":"Amazon","@class":"com.netflix.appinfo.AmazonInfo","metadata":{"ami-launch-index":"","local-hostname":"","availability-zone":"","instance-id":"i-1","public-ipv4":"","public-hostname":"","ami-manifest-path":"","local-ipv4":"1.2.3.4","hostname":"","ami-id":"","instance-type":""}},"leaseInfo":{"renewalIntervalInSecs":0,"durationInSecs":0,"registrationTimestamp":0,"lastRenewalTimestamp":0,"evictionTimestamp":0,"serviceUpTimestamp":0},"metadata":{},"port":{"$":"0","@enabled":"false"},"securePort":{"$":"0","@enabled":"false"}}}`,
	// fargo re-registering what it read back from the server (it does
	// after every registration), an operator's override included.
	`{"instance":{"instanceId":"orders-1","hostName":"orders-1.local","app":"ORDERS","ipAddr":"10.0.0.7","vipAddress":"orders","status":"OUT_OF_SERVICE","overriddenstatus":"OUT_OF_SERVICE","countryId":1,"dataCenterInfo":{"name":"MyOwn","@class":"com.netflix.appinfo.MyDataCenterInfo"},"leaseInfo":{"renewalIntervalInSecs":10,"durationInSecs":30},"metadata":{"zone":"a"},"port":{"$":"8080","@enabled":"true"},"securePort":{"$":"8443","@enabled":"false"}}}`,
	// eureka-js-client 4.5: JSON only, @enabled as a boolean.
	`{"instance":{"app":"JS-SERVICE","hostName":"localhost","ipAddr":"127.0.0.1","instanceId":"js-service-1","statusPageUrl":"http://localhost:3000/info","healthCheckUrl":"http://localhost:3000/health","port":{"$":3000,"@enabled":true},"vipAddress":"js-service","dataCenterInfo":{"@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo","name":"MyOwn"},"status":"UP","metadata":{"zone":"b","weight":10,"canary":false}}}`,
	`{"instance":{"app":"js-service","hostName":"ip-10-0-0-1","ipAddr":"10.0.0.1","port":{"$":"3000","@enabled":"true"},"securePort":{"$":3443,"@enabled":false},"vipAddress":"js-service","dataCenterInfo":{"@class":"com.netflix.appinfo.AmazonInfo","name":"Amazon","metadata":{"instance-id":"i-0abc","availability-zone":"us-east-1a"}},"leaseInfo":{"renewalIntervalInSecs":"30","durationInSecs":"90"}}}`,
	// Ports as bare numbers, strings, booleans; numbers as strings.
	`{"instance":{"instanceId":"n1","app":"N","ipAddr":"10.0.0.9","port":8080,"securePort":"8443","dataCenterInfo":{"name":"MyOwn"},"countryId":"1","isCoordinatingDiscoveryServer":true,"lastDirtyTimestamp":1700000000000}}`,
	`{"instance":{"instanceId":"n2","app":"N","ipAddr":"10.0.0.9","port":{"$":8080,"@enabled":true},"dataCenterInfo":{"name":"MyOwn"},"status":"down"}}`,
	`{"instance":{"instanceId":"n3","app":"N","ipAddr":"10.0.0.9","port":{"$":8080},"dataCenterInfo":{"name":"MyOwn"},"status":"bogus","overriddenStatus":"OUT_OF_SERVICE"}}`,
	`{"instance":{"instanceId":"n4","app":"N","ipAddr":"10.0.0.9","port":"8080","dataCenterInfo":{"name":"Netflix","@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo"},"metadata":{"@class":"java.util.LinkedHashMap","a b":"c","ünï":"x","xmlish":"y","":"empty","n":null,"o":{"k":[1,2]}}}}`,
	// Broken or extreme.
	`{"instance":{"instanceId":"x","app":"X","ipAddr":"1.1.1.1","port":{"$":"abc","@enabled":"yes"},"dataCenterInfo":{"name":"MyOwn"}}}`,
	`{"instance":{"instanceId":"x","app":"X","ipAddr":"1.1.1.1","port":{"$":1e300,"@enabled":"true"},"dataCenterInfo":{"name":"MyOwn"},"leaseInfo":{"durationInSecs":99999999999}}}`,
	`{"instance":{"instanceId":"x","app":"X","ipAddr":"1.1.1.1","port":"NaN","securePort":"-Inf","dataCenterInfo":{"name":"MyOwn"},"lastDirtyTimestamp":"9223372036854775807"}}`,
	`{"instance":{"instanceId":"x","app":"X","ipAddr":"1.1.1.1","port":true,"dataCenterInfo":{}}}`,
	`{"instance":{"instanceId":"x","app":"X","ipAddr":"1.1.1.1","dataCenterInfo":{"@class":"com.netflix.appinfo.MyDataCenterInfo"}}}`,
	`{"instance":{"instanceId":{"a":1},"app":["X"],"ipAddr":12,"dataCenterInfo":{"name":true}}}`,
	`{"instance":{"hostName":"only-host","app":"X","ipAddr":"1.1.1.1","dataCenterInfo":{"name":"MyOwn"},"metadata":"not a map"}}`,
	`{"instance":{"instanceId":"x\u0000y","app":"X\u00e9","ipAddr":" 1.1.1.1 ","dataCenterInfo":{"name":"MyOwn"},"metadata":{"k\u0001":"v\u0002","ok":"\ud800"}}}`,
	`{"instance":null}`,
	`{"instance":[]}`,
	`{"application":{"name":"ORDERS"}}`,
	`{"instance":{"instanceId":"orders-1","app":"ORDERS","ipAddr":"10.0.0.7","port":{"$":8080,"@enabled":"true"`,
	`{"instance":{}}`,
	``,
	`null`,
	`<instance/>`,
}

var InstanceXMLSeeds = []string{
	// Java Eureka client (XStream).
	`<?xml version="1.0" encoding="UTF-8"?>
<instance>
  <instanceId>orders-1:8080</instanceId>
  <hostName>10.0.0.7</hostName>
  <app>ORDERS</app>
  <ipAddr>10.0.0.7</ipAddr>
  <status>UP</status>
  <overriddenstatus>UNKNOWN</overriddenstatus>
  <port enabled="true">8080</port>
  <securePort enabled="false">443</securePort>
  <countryId>1</countryId>
  <dataCenterInfo class="com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo">
    <name>MyOwn</name>
  </dataCenterInfo>
  <leaseInfo>
    <renewalIntervalInSecs>30</renewalIntervalInSecs>
    <durationInSecs>90</durationInSecs>
    <registrationTimestamp>0</registrationTimestamp>
    <lastRenewalTimestamp>0</lastRenewalTimestamp>
    <evictionTimestamp>0</evictionTimestamp>
    <serviceUpTimestamp>0</serviceUpTimestamp>
  </leaseInfo>
  <metadata class="java.util.Collections$EmptyMap"/>
  <homePageUrl>http://10.0.0.7:8080/</homePageUrl>
  <statusPageUrl>http://10.0.0.7:8080/actuator/info</statusPageUrl>
  <healthCheckUrl>http://10.0.0.7:8080/actuator/health</healthCheckUrl>
  <vipAddress>orders</vipAddress>
  <secureVipAddress>orders</secureVipAddress>
  <isCoordinatingDiscoveryServer>false</isCoordinatingDiscoveryServer>
  <lastUpdatedTimestamp>1700000000000</lastUpdatedTimestamp>
  <lastDirtyTimestamp>1700000000000</lastDirtyTimestamp>
</instance>`,
	`<instance><instanceId>payments-1</instanceId><hostName>payments-1</hostName><app>PAYMENTS</app><ipAddr>10.0.3.12</ipAddr><status>STARTING</status><port enabled="true">8081</port><dataCenterInfo class="com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo"><name>MyOwn</name></dataCenterInfo><metadata><management.port>8081</management.port><zone>eu-west-1a</zone></metadata><vipAddress>payments</vipAddress></instance>`,
	// hudl/fargo 1.4.0 (its default, XML).
	`<instance><instanceId>orders-1</instanceId><hostName>orders-1.local</hostName><app>ORDERS</app><ipAddr>10.0.0.7</ipAddr><vipAddress>orders</vipAddress><secureVipAddress>orders-secure</secureVipAddress><status>UP</status><overriddenstatus></overriddenstatus><homePageUrl></homePageUrl><statusPageUrl></statusPageUrl><healthCheckUrl></healthCheckUrl><countryId>0</countryId><dataCenterInfo><name>MyOwn</name><metadata></metadata></dataCenterInfo><leaseInfo><renewalIntervalInSecs>10</renewalIntervalInSecs><durationInSecs>30</durationInSecs><registrationTimestamp>0</registrationTimestamp><lastRenewalTimestamp>0</lastRenewalTimestamp><evictionTimestamp>0</evictionTimestamp><serviceUpTimestamp>0</serviceUpTimestamp></leaseInfo><metadata><zone>a</zone></metadata><port enabled="true">8080</port><securePort enabled="false">8443</securePort></instance>`,
	`<instance><instanceId></instanceId><hostName>h</hostName><app>A</app><ipAddr>1.2.3.4</ipAddr><vipAddress></vipAddress><secureVipAddress></secureVipAddress><status></status><overriddenstatus></overriddenstatus><homePageUrl></homePageUrl><statusPageUrl></statusPageUrl><healthCheckUrl></healthCheckUrl><countryId>0</countryId><dataCenterInfo><name>Amazon</name><metadata><ami-launch-index></ami-launch-index><local-hostname></local-hostname><availability-zone></availability-zone><instance-id>i-1</instance-id><public-ipv4></public-ipv4><public-hostname></public-hostname><ami-manifest-path></ami-manifest-path><local-ipv4>1.2.3.4</local-ipv4><hostname></hostname><ami-id></ami-id><instance-type></instance-type></metadata></dataCenterInfo><leaseInfo><renewalIntervalInSecs>0</renewalIntervalInSecs><durationInSecs>0</durationInSecs><registrationTimestamp>0</registrationTimestamp><lastRenewalTimestamp>0</lastRenewalTimestamp><evictionTimestamp>0</evictionTimestamp><serviceUpTimestamp>0</serviceUpTimestamp></leaseInfo><metadata></metadata><port enabled="false">0</port><securePort enabled="false">0</securePort></instance>`,
	// fargo re-registering what it read back: an override included.
	`<instance><instanceId>orders-1</instanceId><hostName>orders-1.local</hostName><app>ORDERS</app><ipAddr>10.0.0.7</ipAddr><vipAddress>orders</vipAddress><status>OUT_OF_SERVICE</status><overriddenstatus>OUT_OF_SERVICE</overriddenstatus><dataCenterInfo><name>MyOwn</name></dataCenterInfo><metadata><zone>a</zone></metadata><port enabled="true">8080</port></instance>`,
	`<instance><instanceId>shard-c</instanceId><app>zeebe-shards</app><ipAddr>10.1.0.3</ipAddr><port>26500</port><dataCenterInfo><name>MyOwn</name></dataCenterInfo><metadata><slot>3</slot><pool>p1</pool></metadata></instance>`,
	// Odd but valid XML.
	`<instance xmlns:e="urn:eureka"><instanceId>  spaced  </instanceId><app> X </app><ipAddr>&#x20;1.1.1.1</ipAddr><status>down</status><overriddenStatus>DOWN</overriddenStatus><port enabled="TRUE"> 80 </port><dataCenterInfo><name>MyOwn</name></dataCenterInfo><metadata><e:zone>a</e:zone><a.b-c>x&amp;y</a.b-c><xmlKey>dropped</xmlKey><ünï>dropped</ünï><nested><k>v</k></nested></metadata></instance>`,
	`<instance><instanceId>x</instanceId><app>X</app><ipAddr>1.1.1.1</ipAddr><dataCenterInfo class=""><name>MyOwn</name></dataCenterInfo><metadata><a>line&#xD;&#xA;two</a><b><![CDATA[<raw>]]></b></metadata><metadata><c>second</c></metadata></instance>`,
	// Broken.
	`<instance><instanceId>x</instanceId><app>X</app><ipAddr>1.1.1.1</ipAddr><port enabled="maybe">1e40</port><dataCenterInfo><name>MyOwn</name></dataCenterInfo><leaseInfo><durationInSecs>NaN</durationInSecs></leaseInfo></instance>`,
	`<instance><instanceId>x</instanceId><app>X</app><ipAddr>1.1.1.1</ipAddr><dataCenterInfo class="com.netflix.appinfo.MyDataCenterInfo"/></instance>`,
	`<instance><instanceId>x</instanceId><app>X</app><metadata><a>1</a>`,
	`<instance><instanceId>x</b></instance>`,
	`<application><name>ORDERS</name></application>`,
	`<instance/>`,
	``,
	`{"instance":{}}`,
	`<!DOCTYPE instance [<!ENTITY e "x">]><instance><app>&e;</app></instance>`,
}

var AppsJSONSeeds = []string{
	`{"applications":{"versions__delta":"1","apps__hashcode":"","application":[]}}`,
	`{"applications":{"versions__delta":"3","apps__hashcode":"DOWN_1_UP_1_","application":[{"name":"ORDERS","instance":[{"instanceId":"orders-1","hostName":"orders-1","app":"ORDERS","ipAddr":"10.0.0.7","status":"UP","overriddenStatus":"UNKNOWN","port":{"$":8080,"@enabled":"true"},"securePort":{"$":443,"@enabled":"false"},"countryId":1,"dataCenterInfo":{"@class":"com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo","name":"MyOwn"},"leaseInfo":{"renewalIntervalInSecs":30,"durationInSecs":90,"registrationTimestamp":1700000000000,"lastRenewalTimestamp":1700000000000,"evictionTimestamp":0,"serviceUpTimestamp":1700000000000},"metadata":{"@class":"java.util.Collections$EmptyMap"},"homePageUrl":"","statusPageUrl":"","healthCheckUrl":"","vipAddress":"orders","secureVipAddress":"orders","isCoordinatingDiscoveryServer":"false","lastUpdatedTimestamp":"1700000000000","lastDirtyTimestamp":"1700000000000","actionType":"ADDED"},{"instanceId":"orders-2","app":"ORDERS","ipAddr":"10.0.0.8","status":"DOWN","port":{"$":8080,"@enabled":"true"},"dataCenterInfo":{"name":"MyOwn"}}]}]}}`,
	// Old servers: one application and one instance as objects, not arrays.
	`{"applications":{"versions__delta":1,"apps__hashcode":"UP_1_","application":{"name":"ORDERS","instance":{"instanceId":"orders-1","app":"ORDERS","ipAddr":"10.0.0.7","status":"UP","port":{"$":"8080","@enabled":"true"}}}}}`,
	`{"applications":{"application":[{"name":"A","instance":null},{"name":"B"}]}}`,
	`{"applications":{"application":"ORDERS"}}`,
	`{"applications":{"application":[{"name":"A","instance":[1,2]}]}}`,
	`{"applications":null}`,
	`{"applications":{"application":[{"name":"A","instance":{"port":{"$":"x"}}}]}}`,
	`{"applications":{"versions__delta":"1"`,
	`[]`,
	``,
}

// Watchdog turns a hang into a crash that the fuzzer keeps as an input:
// it panics, with every goroutine's stack, when one input takes too long.
func Watchdog(t *testing.T) (stop func()) {
	timer := time.AfterFunc(hang, func() {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		panic(fmt.Sprintf("%s: one input has run for %v: a hang?\n%s", t.Name(), hang, buf))
	})
	return func() { timer.Stop() }
}

// hang is far above what an input takes (well under 10 ms) yet short
// enough to spot a hang in a minute of fuzzing.
const hang = 5 * time.Second

// WellFormedXML reads every token of an XML document.
func WellFormedXML(b []byte) error {
	d := xml.NewDecoder(bytes.NewReader(b))
	depth, roots := 0, 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		switch tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				roots++
			}
			depth++
		case xml.EndElement:
			depth--
		}
	}
	if roots != 1 || depth != 0 {
		return fmt.Errorf("%d root elements, depth %d at the end", roots, depth)
	}
	return nil
}
