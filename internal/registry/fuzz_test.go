package registry

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/shardctl/shardctl/internal/ledger"
)

// Native fuzz tests of the wire decoders and of the whole HTTP API. `go
// test` runs every target over its seed corpus (the f.Add calls below and
// testdata/fuzz/FuzzX/*), so the seeds are regression tests too; to look
// for new inputs:
//
//	go test -run '^$' -fuzz '^FuzzHandler$' -fuzztime 60s -fuzzminimizetime 200x ./internal/registry/
//
// (-fuzzminimizetime: by default every new interesting input is minimized
// for up to 60 s, which stalls a short run.)

// Register bodies as real clients send them, then broken variants.
var fzInstanceJSONSeeds = []string{
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

var fzInstanceXMLSeeds = []string{
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

var fzAppsJSONSeeds = []string{
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

// FuzzDecodeInstanceJSON: decoding never panics; what decodes and
// validates survives encoding and decoding again.
func FuzzDecodeInstanceJSON(f *testing.F) {
	for _, s := range fzInstanceJSONSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		defer fzWatchdog(t)()
		in, err := decodeInstanceJSON(body)
		if err != nil {
			return
		}
		if in == nil {
			t.Fatal("decodeInstanceJSON returned neither an instance nor an error")
		}
		if err := in.validate(in.App); err != nil {
			return
		}
		fzRoundTrip(t, in, encodeInstanceJSON, decodeInstanceJSON, false)
	})
}

// FuzzDecodeInstanceJSONAsEncodingJSON: the token walker that reads a
// registration reads what encoding/json, reflecting over the same struct
// tags, read before it: the same instance, or an error from both.
func FuzzDecodeInstanceJSONAsEncodingJSON(f *testing.F) {
	for _, s := range fzInstanceJSONSeeds {
		f.Add([]byte(s))
	}
	// jsonInInstanceByTags has the fields and tags of jsonInInstance, not
	// its UnmarshalJSON: encoding/json reflects over it.
	type jsonInInstanceByTags jsonInInstance
	f.Fuzz(func(t *testing.T, body []byte) {
		defer fzWatchdog(t)()
		got, err := decodeInstanceJSON(body)
		var doc struct {
			Instance *jsonInInstanceByTags `json:"instance"`
		}
		refErr := json.Unmarshal(body, &doc)
		if refErr == nil && doc.Instance == nil {
			refErr = errors.New("no instance")
		}
		if (err == nil) != (refErr == nil) {
			t.Fatalf("%q: token walker error %v, encoding/json error %v", body, err, refErr)
		}
		if err != nil {
			return
		}
		want := (*jsonInInstance)(doc.Instance).instance()
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n token walker  %+v\n encoding/json %+v", body, got, want)
		}
	})
}

// FuzzDecodeInstanceXML: the same for XML, whose metadata cannot carry
// keys that are not XML names (the encoder drops them).
func FuzzDecodeInstanceXML(f *testing.F) {
	for _, s := range fzInstanceXMLSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		defer fzWatchdog(t)()
		in, err := decodeInstanceXML(body)
		if err != nil {
			return
		}
		if in == nil {
			t.Fatal("decodeInstanceXML returned neither an instance nor an error")
		}
		if err := in.validate(in.App); err != nil {
			return
		}
		fzRoundTrip(t, in, encodeInstanceXML, decodeInstanceXML, true)
	})
}

// fzRoundTrip encodes a validated instance, decodes it again and compares.
// The encoders write the effective status (an override wins), as Eureka
// does, so Status is compared as that.
func fzRoundTrip(t *testing.T, in *Instance, enc func(*Instance) []byte, dec func([]byte) (*Instance, error), xmlNames bool) {
	t.Helper()
	b := enc(in)
	out, err := dec(b)
	if err != nil {
		t.Fatalf("decoding the encoded instance: %v\nencoded: %s", err, b)
	}
	if err := out.validate(in.App); err != nil {
		t.Fatalf("the encoded instance no longer validates (a client re-registering it is refused): %v\nencoded: %s", err, b)
	}
	wantMeta := in.Metadata
	if xmlNames {
		wantMeta = fzXMLNamed(in.Metadata)
	}
	switch {
	case out.InstanceID != in.InstanceID:
		t.Errorf("InstanceID %q, want %q", out.InstanceID, in.InstanceID)
	case out.App != in.App:
		t.Errorf("App %q, want %q", out.App, in.App)
	case out.IPAddr != in.IPAddr:
		t.Errorf("IPAddr %q, want %q", out.IPAddr, in.IPAddr)
	case out.Port != in.Port || out.PortEnabled != in.PortEnabled:
		t.Errorf("port %d enabled %v, want %d enabled %v", out.Port, out.PortEnabled, in.Port, in.PortEnabled)
	case out.Status != in.EffectiveStatus():
		t.Errorf("Status %q, want %q (status %q, overridden %q)", out.Status, in.EffectiveStatus(), in.Status, in.OverriddenStatus)
	case out.OverriddenStatus != in.OverriddenStatus:
		t.Errorf("OverriddenStatus %q, want %q", out.OverriddenStatus, in.OverriddenStatus)
	case !maps.Equal(out.Metadata, wantMeta):
		t.Errorf("Metadata %q, want %q", out.Metadata, wantMeta)
	}
	if t.Failed() {
		t.Fatalf("encoded: %s", b)
	}
	// Encoding is stable: what was read back encodes the same.
	if b2 := enc(out); !bytes.Equal(b, b2) {
		t.Fatalf("encoding is not stable:\nfirst:  %s\nsecond: %s", b, b2)
	}
}

// fzWatchdog turns a hang into a crash that the fuzzer keeps as an input:
// it panics, with every goroutine's stack, when one input takes too long.
func fzWatchdog(t *testing.T) (stop func()) {
	timer := time.AfterFunc(fzHang, func() {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		panic(fmt.Sprintf("%s: one input has run for %v: a hang?\n%s", t.Name(), fzHang, buf))
	})
	return func() { timer.Stop() }
}

// fzHang is far above what an input takes (well under 10 ms) yet short
// enough to spot a hang in a minute of fuzzing.
const fzHang = 5 * time.Second

// fzXMLNamed is the metadata XML can carry.
func fzXMLNamed(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if validXMLName(k) {
			out[k] = v
		}
	}
	return out
}

// FuzzDecodeAppsJSON: reading a full or delta fetch never panics, and what
// it reads encodes (JSON and XML) and reads again.
func FuzzDecodeAppsJSON(f *testing.F) {
	for _, s := range fzAppsJSONSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		defer fzWatchdog(t)()
		apps, err := decodeAppsJSON(body)
		if err != nil {
			return
		}
		b := encodeAppsJSON(apps)
		again, err := decodeAppsJSON(b)
		if err != nil {
			t.Fatalf("decoding the encoded applications: %v\n%s", err, b)
		}
		if got, want := fzShape(again), fzShape(apps); got != want {
			t.Fatalf("applications read back as %s, want %s\n%s", got, want, b)
		}
		if err := fzWellFormedXML(encodeAppsXML(apps)); err != nil {
			t.Fatalf("XML of the applications: %v", err)
		}
	})
}

func fzShape(apps *Applications) string {
	var b strings.Builder
	for _, a := range apps.Applications {
		fmt.Fprintf(&b, "%q:%d ", a.Name, len(a.Instances))
	}
	return b.String()
}

// fzWellFormedXML reads every token of an XML document.
func fzWellFormedXML(b []byte) error {
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

// The HTTP API.

var fzNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fzRoute is one request template; {base} is /eureka or /eureka/v2, {app}
// and {id} the fuzzed segments, escaped.
type fzRoute struct {
	method, path string
	body         bool
	name         string
}

var fzRoutes = []fzRoute{
	{"POST", "{base}/apps/{app}", true, "register"},
	{"GET", "{base}/apps", false, "full"},
	{"GET", "{base}/apps/delta", false, "delta"},
	{"GET", "{base}/apps/{app}", false, "app"},
	{"GET", "{base}/apps/{app}/{id}", false, "instance"},
	{"PUT", "{base}/apps/{app}/{id}", false, "renew"},
	{"DELETE", "{base}/apps/{app}/{id}", false, "cancel"},
	{"PUT", "{base}/apps/{app}/{id}/status", false, "setStatus"},
	{"DELETE", "{base}/apps/{app}/{id}/status", false, "deleteStatus"},
	{"PUT", "{base}/apps/{app}/{id}/metadata", false, "metadata"},
	{"GET", "{base}/instances/{id}", false, "instanceByID"},
	{"GET", "{base}/vips/{app}", false, "vip"},
	{"GET", "{base}/svips/{app}", false, "svip"},
	{"GET", "/shardctl/v1/shards", false, "shards"},
	{"GET", "/shardctl/v1/shards/{id}", false, "shard"},
	{"PUT", "/shardctl/v1/shards/{id}/state", false, "shardState"},
	{"DELETE", "/shardctl/v1/shards/{id}", false, "deregisterShard"},
	{"GET", "/shardctl/v1/watch", false, "watch"},
	{"GET", "/shardctl/v1/status", false, "status"},
	{"GET", "/shardctl/v1/ledger", false, "ledger"},
	{"POST", "/shardctl/v1/ledger", true, "ledgerAppend"},
	{"PUT", "/shardctl/v1/ledger/{id}/keys/{app}", true, "ledgerKeys"},
	{"GET", "/metrics", false, "metrics"},
	{"GET", "/healthz", false, "healthz"},
	{"", "/{raw}", true, "raw"}, // app is the whole path, unescaped
}

// Op codes of the seeds.
const (
	fzRegister = iota
	fzFull
	fzDelta
	fzApp
	fzInstance
	fzRenew
	fzCancel
	fzSetStatus
	fzDeleteStatus
	fzMetadata
	fzInstanceByID
	fzVIP
	fzSVIP
	fzShards
	fzShard
	fzShardState
	fzDeregisterShard
	fzWatch
	fzStatus
	fzLedger
	fzLedgerAppend
	fzLedgerKeys
	fzMetrics
	fzHealthz
	fzRaw
)

// A step is three bytes: route (fzRoutes), method (n%11 < 4: the route's;
// else fzMethods[n%11%7]) and headers:
//
//	bits 0-1  Accept: none (XML), JSON, XML, both
//	bit  2    Accept-Encoding: gzip
//	bits 3-4  Content-Type: none, JSON, XML, text/plain
//	bits 5-6  Content-Encoding: none, gzip, gzip on a plain body, truncated gzip
//	bit  7    /eureka/v2 rather than /eureka
var fzMethods = []string{"GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS"}

const (
	hJSON     = 1
	hXML      = 2
	hBoth     = 3
	hGzip     = 1 << 2
	hCTJSON   = 1 << 3
	hCTXML    = 2 << 3
	hCTText   = 3 << 3
	hCEGzip   = 1 << 5
	hCEPlain  = 2 << 5
	hCETrunc  = 3 << 5
	hV2       = 1 << 7
	fzMaxStep = 4
)

func fzStep(route, method, hdr byte) []byte { return []byte{route, method, hdr} }

func fzSteps(s ...[]byte) []byte { return bytes.Join(s, nil) }

// FuzzHandler drives the real handler, no network, with up to four
// requests on one fresh registry: after each, nothing answered 5xx and the
// registry still reads back consistently, in JSON and XML, full and delta.
func FuzzHandler(f *testing.F) {
	type seed struct {
		steps          []byte
		app, id, query string
		body           string
		bolt           bool
	}
	var seeds []seed
	for i, b := range fzInstanceJSONSeeds {
		in, _ := decodeInstanceJSON([]byte(b))
		app, id := "ORDERS", "orders-1"
		if in != nil {
			app, id = in.App, firstNonEmpty(in.InstanceID, in.HostName)
		}
		hdr := byte(hJSON | hCTJSON)
		if i%3 == 1 {
			hdr = hJSON | hCTJSON | hCEGzip | hGzip | hV2
		}
		seeds = append(seeds, seed{steps: fzSteps(fzStep(fzRegister, 0, hdr), fzStep(fzInstance, 0, hdr), fzStep(fzDelta, 0, hXML)), app: app, id: id, body: b, bolt: i%4 == 0})
	}
	for i, b := range fzInstanceXMLSeeds {
		in, _ := decodeInstanceXML([]byte(b))
		app, id := "ORDERS", "orders-1"
		if in != nil {
			app, id = in.App, firstNonEmpty(in.InstanceID, in.HostName)
		}
		hdr := byte(hCTXML | hV2)
		if i%2 == 1 {
			hdr = hXML | hCEGzip
		}
		seeds = append(seeds, seed{steps: fzSteps(fzStep(fzRegister, 0, hdr), fzStep(fzApp, 0, hXML), fzStep(fzFull, 0, hGzip)), app: app, id: id, body: b, bolt: i%4 == 1})
	}
	java := fzInstanceJSONSeeds[0]
	fargoRead := fzInstanceJSONSeeds[5]
	seeds = append(seeds,
		// Eureka's life cycle on the preloaded instances.
		seed{steps: fzSteps(fzStep(fzRenew, 0, 0), fzStep(fzSetStatus, 0, 0), fzStep(fzDeleteStatus, 0, hV2)), app: "orders", id: "orders-1", query: "status=UP&lastDirtyTimestamp=1700000000000&value=OUT_OF_SERVICE"},
		seed{steps: fzSteps(fzStep(fzMetadata, 0, 0), fzStep(fzInstance, 0, hJSON), fzStep(fzCancel, 0, 0), fzStep(fzRenew, 0, 0)), app: "ORDERS", id: "orders-2", query: "zone=b&weight=10&@class=x&a+b=%FF", bolt: true},
		seed{steps: fzSteps(fzStep(fzRenew, 0, hV2), fzStep(fzRenew, 0, 0)), app: "ORDERS", id: "orders-1", query: "lastDirtyTimestamp=99999999999999&overriddenstatus=DOWN"},
		seed{steps: fzSteps(fzStep(fzVIP, 0, hJSON|hGzip), fzStep(fzSVIP, 0, 0), fzStep(fzInstanceByID, 0, hJSON)), app: "orders", id: "pay-1"},
		seed{steps: fzSteps(fzStep(fzSetStatus, 0, 0)), app: "PAYMENTS", id: "pay-1", query: "value=bogus"},
		seed{steps: fzSteps(fzStep(fzDeleteStatus, 0, 0), fzStep(fzApp, 0, hJSON)), app: "PAYMENTS", id: "pay-1", query: "value=UP"},
		// A client re-registering with an override it read back, then the
		// operator removing every override.
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON), fzStep(fzDeleteStatus, 0, 0), fzStep(fzInstance, 0, hJSON)), app: "ORDERS", id: "orders-1", body: fargoRead},
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTXML), fzStep(fzDeleteStatus, 0, 0)), app: "ORDERS", id: "orders-1", body: fzInstanceXMLSeeds[4], bolt: true},
		// shardctl's API.
		seed{steps: fzSteps(fzStep(fzShards, 0, 0), fzStep(fzShard, 0, 0), fzStep(fzShardState, 0, 0), fzStep(fzShards, 0, 0)), id: "shard-a", query: "app=zeebe-shards&value=DRAINING"},
		seed{steps: fzSteps(fzStep(fzShardState, 0, 0), fzStep(fzDeregisterShard, 0, 0), fzStep(fzRegister, 0, hCTJSON)), app: "ZEEBE-SHARDS", id: "shard-b", query: "value=UP&release-slot=true", body: fzInstanceJSONSeeds[2]},
		seed{steps: fzSteps(fzStep(fzDeregisterShard, 0, 0), fzStep(fzShards, 0, 0)), id: "shard-a", query: "release-slot=1", bolt: true},
		seed{steps: fzSteps(fzStep(fzWatch, 0, 0), fzStep(fzShardState, 0, 0), fzStep(fzWatch, 0, 0)), id: "shard-b", query: "poll=1&since=2&timeout=0s&value=OUT_OF_SERVICE"},
		seed{steps: fzSteps(fzStep(fzWatch, 0, 0)), query: "app=ORDERS&since=1"},
		seed{steps: fzSteps(fzStep(fzStatus, 0, 0), fzStep(fzMetrics, 0, 0), fzStep(fzHealthz, 0, 0))},
		seed{steps: fzSteps(fzStep(fzLedgerAppend, 0, 0), fzStep(fzLedger, 0, 0)), body: `{"resources":[{"name":"pay.bpmn","content":"PGRlZmluaXRpb25zLz4="}],"processes":[{"bpmnProcessId":"pay","version":1,"keys":null}],"messageStarts":["go"]}`, bolt: true},
		seed{steps: fzSteps(fzStep(fzLedgerKeys, 0, 0), fzStep(fzLedger, 0, hJSON)), app: "shard-a", id: "1", body: `{"order@1":2251799813685249,"other@2":1}`},
		seed{steps: fzSteps(fzStep(fzLedgerKeys, 0, hCEGzip)), app: "shard-a", id: "7", body: `{"order@1":"x"}`},
		seed{steps: fzSteps(fzStep(fzLedgerAppend, 0, 0)), body: `{"resources":[]}`},
		// Broken requests.
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON|hCEPlain)), app: "ORDERS", body: java},
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON|hCETrunc)), app: "ORDERS", body: java},
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTText)), app: "orders", body: java},
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTXML)), app: "ORDERS", body: java},
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON)), app: "PAYMENTS", body: java},
		seed{steps: fzSteps(fzStep(fzRegister, 5, 0), fzStep(fzCancel, 4, 0), fzStep(fzFull, 7, 0), fzStep(fzStatus, 8, 0)), app: "ORDERS", id: "orders-1", body: java},
		seed{steps: fzSteps(fzStep(fzRaw, 4, hJSON)), app: "eureka/apps/../v2/apps/ORDERS/orders-1", query: "a=b"},
		seed{steps: fzSteps(fzStep(fzRaw, 9, 0)), app: "eureka/apps/ORDERS/orders-1/status", query: "value=DOWN"},
		seed{steps: fzSteps(fzStep(fzInstance, 0, hJSON), fzStep(fzCancel, 0, 0)), app: "ORDERS", id: "a/b"},
		seed{steps: fzSteps(fzStep(fzRenew, 0, 0)), app: "ORDERS", id: "orders-1", query: "lastDirtyTimestamp=soon"},
		seed{steps: fzSteps(fzStep(fzWatch, 0, 0)), query: "since=x"},
		seed{steps: fzSteps(fzStep(fzWatch, 0, 0)), query: "poll=1&timeout=-1s"},
		// Regressions: registry bugs this target found.
		//
		// A lease of 10^10 s overflowed time.Duration in Registry.put: the
		// registration answered 204 and the next eviction removed it.
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON)), app: "ORDERS", body: `{"instance":{"instanceId":"long-lease","app":"ORDERS","ipAddr":"10.0.0.9","dataCenterInfo":{"name":"MyOwn"},"leaseInfo":{"renewalIntervalInSecs":30,"durationInSecs":10000000000}}}`},
		// A lease of 3*10^11 s ended after year 9999: every shardctl JSON
		// answer naming the instance was 200 with an empty body.
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON)), app: "ORDERS", body: `{"instance":{"instanceId":"longer-lease","app":"ORDERS","ipAddr":"10.0.0.9","dataCenterInfo":{"name":"MyOwn"},"leaseInfo":{"renewalIntervalInSecs":30,"durationInSecs":300000000000}}}`},
		// On bolt, an instance id over bbolt's 32 KiB key limit answered 500.
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON)), app: "ORDERS", bolt: true, body: `{"instance":{"instanceId":"` + strings.Repeat("i", 40000) + `","app":"ORDERS","ipAddr":"10.0.0.9","dataCenterInfo":{"name":"MyOwn"}}}`},
		// On bolt, an app name holding NUL split wrongly on reload: the
		// override came back on another instance.
		seed{steps: fzSteps(fzStep(fzRegister, 0, hCTJSON), fzStep(fzSetStatus, 0, 0)), app: "A\x00B", id: "i", query: "value=OUT_OF_SERVICE", bolt: true, body: `{"instance":{"instanceId":"i","app":"A\u0000B","ipAddr":"10.0.0.9","dataCenterInfo":{"name":"MyOwn"}}}`},
	)
	for _, s := range seeds {
		f.Add(s.steps, s.app, s.id, s.query, []byte(s.body), s.bolt)
	}
	f.Fuzz(fzHandlerInput)
}

// fzHandlerInput runs one input of FuzzHandler.
func fzHandlerInput(t *testing.T, steps []byte, app, id, query string, body []byte, bolt bool) {
	if len(body) > 64<<10 || len(app)+len(id)+len(query) > 4<<10 {
		return // an instance is a few KiB; keep each input quick
	}
	defer fzWatchdog(t)()
	h := fzNewHarness(t, steps, bolt)
	defer h.close()
	checked := uint64(0)
	for i := 0; i+3 <= len(steps) && i/3 < fzMaxStep; i += 3 {
		h.step(steps[i], steps[i+1], steps[i+2], app, id, query, body)
		if v := h.r.Version(); v != checked { // nothing to check when nothing changed
			h.checkConsistent()
			checked = v
		}
	}
	if checked == 0 {
		h.checkConsistent()
	}
	h.checkEnd()
}

// fzHarness is one fresh registry, its handler, and a Eureka client's copy
// of the registry kept up to date by deltas.
type fzHarness struct {
	t     *testing.T
	r     *Registry
	h     http.Handler
	bolt  string // the store's path, when bolt
	copy  map[InstanceRef]*Instance
	trace []string
}

func fzNewHarness(t *testing.T, steps []byte, bolt bool) *fzHarness {
	h := &fzHarness{t: t}
	opts := Options{Now: func() time.Time { return fzNow }, ReadStaleness: -1}
	if bolt {
		dir := "/dev/shm" // bbolt fsyncs every write: keep it in memory
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			dir = ""
		}
		d, err := os.MkdirTemp(dir, "fuzz-registry-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		h.bolt = filepath.Join(d, "registry.db")
		st, err := OpenBoltStore(h.bolt)
		if err != nil {
			t.Fatal(err)
		}
		opts.Store = st
	}
	r, err := NewRegistry(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.r = r
	var ho HandlerOptions
	for i := 0; i+3 <= len(steps) && i/3 < fzMaxStep; i += 3 {
		if int(steps[i])%len(fzRoutes) == fzMetrics {
			ho.Metrics = NewMetrics(r) // only when scraped: it costs
		}
	}
	h.h = r.Handler(ho)
	h.preload()
	h.copy = map[InstanceRef]*Instance{}
	full := h.fetchApps(false, false)
	for _, a := range full.Applications {
		for _, in := range a.Instances {
			h.copy[InstanceRef{in.App, in.InstanceID}] = in
		}
	}
	return h
}

func (h *fzHarness) close() {
	if h.r != nil {
		_ = h.r.Close()
	}
}

// preload registers what the seeds name: two apps, two shards, overrides
// and one deployment.
func (h *fzHarness) preload() {
	t := h.t
	mk := func(app, id string, st Status, port int, md map[string]string) *Instance {
		return &Instance{
			InstanceID: id, App: app, HostName: id + ".local", IPAddr: "10.0.0." + strconv.Itoa(port%200), Status: st,
			Port: port, PortEnabled: true, SecurePort: 443, VIPAddress: strings.ToLower(app), SecureVIPAddress: strings.ToLower(app) + "-secure",
			DataCenterInfo: DataCenterInfo{Class: "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo", Name: "MyOwn"},
			LeaseInfo:      LeaseInfo{RenewalIntervalInSecs: 10, DurationInSecs: 30},
			Metadata:       md,
		}
	}
	for _, in := range []*Instance{
		mk("ORDERS", "orders-1", StatusUp, 8080, map[string]string{"zone": "a"}),
		mk("ORDERS", "orders-2", StatusDown, 8081, nil),
		mk("PAYMENTS", "pay-1", StatusStarting, 8090, map[string]string{"management.port": "8091"}),
		mk("ZEEBE-SHARDS", "shard-a", StatusUp, 26500, map[string]string{MetaSlot: "1", MetaPool: "p1"}),
		mk("ZEEBE-SHARDS", "shard-b", StatusUp, 26501, map[string]string{MetaPool: "p2"}),
	} {
		if err := h.r.Register(in.App, in); err != nil {
			t.Fatalf("preload %s/%s: %v", in.App, in.InstanceID, err)
		}
	}
	if err := h.r.SetOverride("PAYMENTS", "pay-1", Override{Status: StatusOutOfService}); err != nil {
		t.Fatal(err)
	}
	if err := h.r.SetState("ZEEBE-SHARDS", "shard-b", StateDraining); err != nil {
		t.Fatal(err)
	}
	d := ledger.Deployment{
		Resources: []ledger.Resource{{Name: "order.bpmn", Content: []byte("<definitions/>")}},
		Processes: []ledger.ProcessID{{BpmnProcessID: "order", Version: 1, Keys: map[string]int64{"shard-a": 2251799813685249}}},
	}
	if _, err := h.r.AppendDeployment(d); err != nil {
		t.Fatal(err)
	}
}

// fzSeg escapes one path segment; "" stays "" (the mux then sees //).
func fzSeg(s string) string { return url.PathEscape(s) }

// fzQuery keeps what an HTTP server would let through in a request line.
func fzQuery(q string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x21 || r == 0x7f || r == '#' || r == utf8.RuneError {
			return -1
		}
		return r
	}, q)
}

type fzResponse struct {
	code   int
	header http.Header
	body   []byte // gunzipped
}

// serve sends one request and checks what every answer must be: no 5xx,
// and a 2xx body that is the JSON or XML it says it is.
func (h *fzHarness) serve(method, target, rawPath, query string, hdr http.Header, body []byte, watch bool) fzResponse {
	return h.serveChecked(method, target, rawPath, query, hdr, body, watch, true)
}

// serveChecked is serve; check false leaves the body to the caller, which
// parses it anyway.
func (h *fzHarness) serveChecked(method, target, rawPath, query string, hdr http.Header, body []byte, watch, check bool) fzResponse {
	t := h.t
	t.Helper()
	ctx := context.Background()
	if watch {
		// A watch lasts as long as its client: this one has gone, so the
		// stream and the long poll end at once.
		c, cancel := context.WithCancel(ctx)
		cancel()
		ctx = c
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://registry.test/", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if rawPath != "" {
		req.URL.Path = rawPath
	} else {
		u, err := url.Parse(target)
		if err != nil {
			t.Fatalf("parse %q: %v", target, err)
		}
		req.URL.Path, req.URL.RawPath = u.Path, u.RawPath
	}
	req.URL.RawQuery = query
	req.RequestURI = req.URL.RequestURI()
	maps.Copy(req.Header, hdr)
	rec := httptest.NewRecorder()
	start := time.Now()
	h.h.ServeHTTP(rec, req)
	took := time.Since(start)
	desc := fmt.Sprintf("%s %s %v (%d-byte body)", method, req.URL.RequestURI(), hdr, len(body))
	h.trace = append(h.trace, fmt.Sprintf("%s -> %d", desc, rec.Code))
	if took > 2*time.Second {
		h.fatalf("%s took %v", desc, took)
	}
	res := fzResponse{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	if res.code >= 500 {
		h.fatalf("%s answered %d: %s", desc, res.code, res.body)
	}
	if strings.EqualFold(res.header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(bytes.NewReader(res.body))
		if err != nil {
			h.fatalf("%s: gzip answer: %v", desc, err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil {
			h.fatalf("%s: gzip answer: %v", desc, err)
		}
		res.body = plain
	}
	if !check || res.code/100 != 2 || res.code == http.StatusNoContent || method == "HEAD" {
		return res
	}
	ct := res.header.Get("Content-Type")
	switch {
	case strings.Contains(ct, "event-stream"):
		for _, line := range strings.Split(string(res.body), "\n") {
			if data, ok := strings.CutPrefix(line, "data:"); ok && !json.Valid([]byte(data)) {
				h.fatalf("%s answered an event whose data is not JSON: %q\n%s", desc, line, res.body)
			}
		}
	case strings.Contains(ct, "json"):
		if watch && len(res.body) == 0 {
			break // the client went away before anything changed
		}
		if !json.Valid(res.body) {
			h.fatalf("%s answered %d %s with a body that is not JSON: %q", desc, res.code, ct, res.body)
		}
	case strings.Contains(ct, "xml"):
		if err := fzWellFormedXML(res.body); err != nil {
			h.fatalf("%s answered %d %s with a body that is not XML (%v): %q", desc, res.code, ct, err, res.body)
		}
	}
	return res
}

func (h *fzHarness) fatalf(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("%s\nrequests:\n  %s", fmt.Sprintf(format, args...), strings.Join(h.trace, "\n  "))
}

func fzHeader(b byte) http.Header {
	hdr := http.Header{}
	switch b & 3 {
	case hJSON:
		hdr.Set("Accept", "application/json")
	case hXML:
		hdr.Set("Accept", "application/xml")
	case hBoth:
		hdr.Set("Accept", "application/json;q=0.9, application/xml;q=0.8")
	}
	if b&hGzip != 0 {
		hdr.Set("Accept-Encoding", "gzip")
	}
	switch b & (3 << 3) {
	case hCTJSON:
		hdr.Set("Content-Type", "application/json")
	case hCTXML:
		hdr.Set("Content-Type", "application/xml; charset=utf-8")
	case hCTText:
		hdr.Set("Content-Type", "text/plain")
	}
	if b&(3<<5) != 0 {
		hdr.Set("Content-Encoding", "gzip")
	}
	hdr.Set("DiscoveryIdentity-Name", "DefaultClient")
	hdr.Set("DiscoveryIdentity-Version", "1.4")
	return hdr
}

func fzGzip(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return buf.Bytes()
}

// step sends one fuzzed request and checks what its answer promises.
func (h *fzHarness) step(routeB, methodB, hdrB byte, app, id, query string, body []byte) {
	rt := fzRoutes[int(routeB)%len(fzRoutes)]
	op := int(routeB) % len(fzRoutes)
	method := rt.method
	if m := int(methodB) % (len(fzMethods) + 4); m >= 4 || method == "" {
		method = fzMethods[m%len(fzMethods)]
	}
	base := "/eureka"
	if hdrB&hV2 != 0 {
		base = "/eureka/v2"
	}
	target := strings.NewReplacer("{base}", base, "{app}", fzSeg(app), "{id}", fzSeg(id)).Replace(rt.path)
	rawPath := ""
	if op == fzRaw {
		rawPath = "/" + app
	}
	var sent []byte
	if rt.body || method == "POST" || method == "PUT" {
		sent = body
		switch hdrB & (3 << 5) {
		case hCEGzip:
			sent = fzGzip(body)
		case hCETrunc:
			z := fzGzip(body)
			sent = z[:len(z)/2]
		}
	}
	hdr := fzHeader(hdrB)
	q := fzQuery(query)
	res := h.serve(method, target, rawPath, q, hdr, sent, op == fzWatch)
	if method != rt.method || res.code/100 != 2 {
		return
	}
	values, _ := url.ParseQuery(q)
	r := h.r
	switch op {
	case fzRegister:
		in := fzDecodeLikeHandler(hdr.Get("Content-Type"), body)
		if in == nil {
			h.fatalf("register answered %d to a body the decoders refuse", res.code)
		}
		if err := in.validate(app); err != nil {
			h.fatalf("register answered %d to an instance that does not validate: %v", res.code, err)
		}
		got, err := r.Instance(in.App, in.InstanceID)
		if err != nil {
			h.fatalf("registered %s/%q, then: %v", in.App, in.InstanceID, err)
		}
		if got.IPAddr != in.IPAddr || got.Port != in.Port || got.PortEnabled != in.PortEnabled {
			h.fatalf("registered %+v, the registry holds %+v", in, got)
		}
		h.readBack(base, in.App, in.InstanceID)
	case fzCancel:
		if _, err := r.Instance(app, id); err == nil {
			h.fatalf("cancelled %s/%q, still there", app, id)
		}
	case fzSetStatus:
		got, err := r.Instance(app, id)
		if err != nil {
			h.fatalf("status of %s/%q set, then: %v", app, id, err)
		}
		if want := ParseStatus(values.Get("value")); got.EffectiveStatus() != want {
			h.fatalf("status of %s/%q set to %s, reads %s", app, id, want, got.EffectiveStatus())
		}
	case fzDeleteStatus:
		got, err := r.Instance(app, id)
		if err != nil {
			h.fatalf("override of %s/%q removed, then: %v", app, id, err)
		}
		if got.OverriddenStatus != StatusUnknown {
			h.fatalf("override of %s/%q removed (200), but it still reads overriddenStatus %s (status %s, effective %s)",
				app, id, got.OverriddenStatus, got.Status, got.EffectiveStatus())
		}
	case fzMetadata:
		got, err := r.Instance(app, id)
		if err != nil {
			h.fatalf("metadata of %s/%q set, then: %v", app, id, err)
		}
		for k, vs := range values {
			if got.Metadata[k] != vs[len(vs)-1] {
				h.fatalf("metadata %q of %s/%q set to %q, reads %q", k, app, id, vs[len(vs)-1], got.Metadata[k])
			}
		}
	case fzDeregisterShard:
		shardsApp := r.opts.ShardsApp
		if a := values.Get("app"); a != "" {
			shardsApp = strings.ToUpper(a)
		}
		if _, err := r.Instance(shardsApp, id); err == nil {
			h.fatalf("deregistered shard %s/%q, still there", shardsApp, id)
		}
	}
}

// fzDecodeLikeHandler picks the decoder as the register handler does.
func fzDecodeLikeHandler(ct string, b []byte) *Instance {
	ct = strings.ToLower(ct)
	trimmed := bytes.TrimSpace(b)
	var in *Instance
	var err error
	if strings.Contains(ct, "json") || !strings.Contains(ct, "xml") && len(trimmed) > 0 && trimmed[0] == '{' {
		in, err = decodeInstanceJSON(b)
	} else {
		in, err = decodeInstanceXML(b)
	}
	if err != nil {
		return nil
	}
	return in
}

// readBack fetches a registered instance as a client would, in both
// formats.
func (h *fzHarness) readBack(base, app, id string) {
	if id == "." || id == ".." {
		return // the mux cleans such a path before routing it
	}
	target := base + "/apps/" + fzSeg(app) + "/" + fzSeg(id)
	for _, asJSON := range []bool{true, false} {
		hdr := http.Header{}
		if asJSON {
			hdr.Set("Accept", "application/json")
		}
		res := h.serve("GET", target, "", "", hdr, nil, false)
		if res.code != http.StatusOK {
			h.fatalf("GET %s of a registered instance answered %d: %s", target, res.code, res.body)
		}
		var in *Instance
		var err error
		if asJSON {
			in, err = decodeInstanceJSON(res.body)
		} else {
			in, err = decodeInstanceXML(res.body)
		}
		if err != nil {
			h.fatalf("GET %s (json %v): %v\n%s", target, asJSON, err, res.body)
		}
		wantApp, wantID := fzWireText(app, !asJSON), fzWireText(id, !asJSON)
		if in.InstanceID != wantID || in.App != wantApp {
			h.fatalf("GET %s (json %v) read back %q/%q, want %q/%q", target, asJSON, in.App, in.InstanceID, wantApp, wantID)
		}
	}
}

// fzWireText is how an id reads back through decodeInstanceJSON or
// decodeInstanceXML: XML cannot carry some characters (the encoder writes
// U+FFFD) and the XML decoder trims ids.
func fzWireText(s string, asXML bool) string {
	if !asXML {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.TrimSpace(fzXMLSafe(s))
}

// fzXMLSafe is a string as XML 1.0 can carry it.
func fzXMLSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == 0x09 || r == 0x0A || r == 0x0D || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF {
			return r
		}
		return '\uFFFD'
	}, strings.ToValidUTF8(s, "\uFFFD"))
}

// fetchApps reads GET /eureka/apps (or /delta) and checks it is what
// clients parse.
func (h *fzHarness) fetchApps(delta, asXML bool) *Applications {
	target := "/eureka/apps"
	if delta {
		target += "/delta"
	}
	hdr := http.Header{}
	if !asXML {
		hdr.Set("Accept", "application/json")
	}
	res := h.serveChecked("GET", target, "", "", hdr, nil, false, false)
	if res.code != http.StatusOK {
		h.fatalf("GET %s answered %d: %s", target, res.code, res.body)
	}
	if asXML {
		var doc struct {
			XMLName       xml.Name `xml:"applications"`
			VersionsDelta string   `xml:"versions__delta"`
			AppsHashcode  *string  `xml:"apps__hashcode"`
			Application   []xmlApp `xml:"application"`
		}
		if err := xml.Unmarshal(res.body, &doc); err != nil {
			h.fatalf("GET %s (XML): %v\n%s", target, err, res.body)
		}
		if doc.AppsHashcode == nil {
			h.fatalf("GET %s (XML): no apps__hashcode\n%s", target, res.body)
		}
		out := &Applications{VersionsDelta: doc.VersionsDelta, AppsHashcode: *doc.AppsHashcode}
		for _, a := range doc.Application {
			app := Application{Name: a.Name}
			for i := range a.Instance {
				w := a.Instance[i]
				in := w.instance()
				in.InstanceID = w.InstanceID // untrimmed, as written
				in.ActionType = w.ActionType
				app.Instances = append(app.Instances, in)
			}
			out.Applications = append(out.Applications, app)
		}
		return out
	}
	var anyDoc any
	if err := json.Unmarshal(res.body, &anyDoc); err != nil {
		h.fatalf("GET %s (JSON): %v\n%s", target, err, res.body)
	}
	apps, err := decodeAppsJSON(res.body)
	if err != nil {
		h.fatalf("GET %s (JSON): decodeAppsJSON: %v\n%s", target, err, res.body)
	}
	return apps
}

// fzHashcode is apps__hashcode computed here, independently.
func fzHashcode(statuses []Status) string {
	counts := map[Status]int{}
	for _, s := range statuses {
		counts[s]++
	}
	var b strings.Builder
	for _, st := range []Status{"DOWN", "OUT_OF_SERVICE", "STARTING", "UNKNOWN", "UP"} {
		if counts[st] > 0 {
			fmt.Fprintf(&b, "%s_%d_", st, counts[st])
			delete(counts, st)
		}
	}
	for st, n := range counts {
		fmt.Fprintf(&b, "?%s_%d_", st, n)
	}
	return b.String()
}

type fzListed struct {
	app, id string
	status  Status
}

func fzList(apps *Applications) ([]fzListed, []Status) {
	var out []fzListed
	var sts []Status
	for _, a := range apps.Applications {
		for _, in := range a.Instances {
			out = append(out, fzListed{a.Name, in.InstanceID, in.Status})
			sts = append(sts, in.Status)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].app != out[j].app {
			return out[i].app < out[j].app
		}
		return out[i].id < out[j].id
	})
	return out, sts
}

// checkConsistent: the full fetch reads in JSON and XML, lists what the
// registry holds with a matching apps__hashcode, and a client that applied
// the delta holds the same.
func (h *fzHarness) checkConsistent() {
	var want []fzListed
	var wantSt []Status
	for _, in := range h.r.Instances("") {
		want = append(want, fzListed{in.App, in.InstanceID, in.EffectiveStatus()})
		wantSt = append(wantSt, in.EffectiveStatus())
	}
	sort.Slice(want, func(i, j int) bool {
		if want[i].app != want[j].app {
			return want[i].app < want[j].app
		}
		return want[i].id < want[j].id
	})
	wantHash := fzHashcode(wantSt)
	// The clock stands still here: every lease was renewed or granted
	// now, for at least a second, so none has expired.
	if n := h.r.Evict(); n != 0 {
		h.fatalf("%d leases evicted with the clock standing still at their registration", n)
	}
	for _, asXML := range []bool{false, true} {
		full := h.fetchApps(false, asXML)
		got, sts := fzList(full)
		if full.AppsHashcode != fzHashcode(sts) {
			h.fatalf("full fetch (xml %v): apps__hashcode %q, but it lists %d instances: %s", asXML, full.AppsHashcode, len(got), fzHashcode(sts))
		}
		if full.AppsHashcode != wantHash {
			h.fatalf("full fetch (xml %v): apps__hashcode %q, the registry holds %s", asXML, full.AppsHashcode, wantHash)
		}
		wantHere := want
		if asXML {
			wantHere = make([]fzListed, len(want))
			for i, w := range want {
				wantHere[i] = fzListed{fzXMLSafe(w.app), fzXMLSafe(w.id), w.status}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(wantHere) {
			h.fatalf("full fetch (xml %v) lists\n  %v\nthe registry holds\n  %v", asXML, got, wantHere)
		}
	}
	// A Eureka client applies the delta to its copy, then compares its
	// hashcode with the delta's; a difference makes it fetch everything.
	delta := h.fetchApps(true, false)
	for _, a := range delta.Applications {
		for _, in := range a.Instances {
			ref := InstanceRef{in.App, in.InstanceID}
			switch in.ActionType {
			case ActionAdded, ActionModified:
				h.copy[ref] = in
			case ActionDeleted:
				delete(h.copy, ref)
			default:
				h.fatalf("delta: instance %s/%q with actionType %q", in.App, in.InstanceID, in.ActionType)
			}
		}
	}
	var mine []fzListed
	var mineSt []Status
	for ref, in := range h.copy {
		mine = append(mine, fzListed{ref.App, ref.ID, in.Status})
		mineSt = append(mineSt, in.Status)
	}
	sort.Slice(mine, func(i, j int) bool {
		if mine[i].app != mine[j].app {
			return mine[i].app < mine[j].app
		}
		return mine[i].id < mine[j].id
	})
	if got := fzHashcode(mineSt); got != delta.AppsHashcode {
		h.fatalf("a client that applied the delta has %s, the delta's apps__hashcode is %q", got, delta.AppsHashcode)
	}
	if fmt.Sprint(mine) != fmt.Sprint(want) {
		h.fatalf("a client that applied the delta holds\n  %v\nthe registry holds\n  %v", mine, want)
	}
	// Every registered shard holds its own slot, 1-31, named in its
	// metadata; no two share one.
	h.r.mu.RLock()
	slots := maps.Clone(h.r.slots)
	h.r.mu.RUnlock()
	holder := map[int]string{}
	for _, in := range h.r.Instances(h.r.opts.ShardsApp) {
		slot := slots[InstanceRef{in.App, in.InstanceID}]
		if slot < 1 || slot > 31 || in.Metadata[MetaSlot] != strconv.Itoa(slot) {
			h.fatalf("shard %q: slot %d, metadata slot %q", in.InstanceID, slot, in.Metadata[MetaSlot])
		}
		if other, ok := holder[slot]; ok {
			h.fatalf("shards %q and %q both hold slot %d", other, in.InstanceID, slot)
		}
		holder[slot] = in.InstanceID
	}
	// shardctl's view of every app must encode too.
	apps := map[string]bool{h.r.opts.ShardsApp: true}
	for _, w := range want {
		apps[w.app] = true
	}
	for app := range apps {
		res := h.serve("GET", "/shardctl/v1/shards", "", "app="+url.QueryEscape(app), nil, nil, false)
		if res.code != http.StatusOK {
			h.fatalf("GET /shardctl/v1/shards?app=%s answered %d", app, res.code)
		}
	}
}

func fzFlat(apps *Applications) []*Instance {
	var out []*Instance
	for _, a := range apps.Applications {
		out = append(out, a.Instances...)
	}
	return out
}

// checkEnd: gzip answers match plain ones, the status counts what is
// listed, and a bolt store reopened holds what the registry held.
func (h *fzHarness) checkEnd() {
	plain := h.serve("GET", "/eureka/v2/apps", "", "", http.Header{"Accept": {"application/json"}}, nil, false)
	zipped := h.serve("GET", "/eureka/v2/apps", "", "", http.Header{"Accept": {"application/json"}, "Accept-Encoding": {"gzip"}}, nil, false)
	if !bytes.Equal(plain.body, zipped.body) {
		h.fatalf("gzipped full fetch differs from the plain one")
	}
	delta, xmlDelta := h.fetchApps(true, false), h.fetchApps(true, true)
	if len(fzFlat(xmlDelta)) != len(fzFlat(delta)) || xmlDelta.AppsHashcode != delta.AppsHashcode {
		h.fatalf("delta lists %d instances (%s) in XML, %d (%s) in JSON",
			len(fzFlat(xmlDelta)), xmlDelta.AppsHashcode, len(fzFlat(delta)), delta.AppsHashcode)
	}
	st := h.serve("GET", "/shardctl/v1/status", "", "", nil, nil, false)
	var health Health
	if err := json.Unmarshal(st.body, &health); err != nil {
		h.fatalf("status: %v", err)
	}
	if n := len(h.r.Instances("")); health.Instances != n {
		h.fatalf("status counts %d instances, the registry holds %d", health.Instances, n)
	}
	if h.bolt == "" {
		return
	}
	before := h.state(h.r)
	if err := h.r.Close(); err != nil {
		h.fatalf("close: %v", err)
	}
	h.r = nil
	store, err := OpenBoltStore(h.bolt)
	if err != nil {
		h.fatalf("reopen the bolt store: %v", err)
	}
	r2, err := NewRegistry(Options{Now: func() time.Time { return fzNow }, Store: store, ReadStaleness: -1})
	if err != nil {
		store.Close()
		h.fatalf("a registry on the reopened store: %v", err)
	}
	h.r = r2
	after := h.state(r2)
	b, a := strings.Split(before, "\n  "), strings.Split(after, "\n  ")
	for i := range b {
		if a[i] != b[i] {
			h.fatalf("after a restart on the bolt store the registry holds\n  %s\nbefore it held\n  %s", a[i], b[i])
		}
	}
}

// state is what a store must keep, as clients see it (JSON, where invalid
// UTF-8 reads as U+FFFD): instances, overrides, slots and the ledger.
func (h *fzHarness) state(r *Registry) string {
	var b strings.Builder
	b.Write(fzNormJSON(encodeAppsJSON(&Applications{AppsHashcode: hashcode(r.Instances("")), Applications: group(r.Instances(""))})))
	r.mu.RLock()
	ov := make([]string, 0, len(r.overrides))
	for ref, o := range r.overrides {
		ov = append(ov, fmt.Sprintf("%q/%q=%+v", fzValid(ref.App), fzValid(ref.ID), o))
	}
	sl := make([]string, 0, len(r.slots))
	for ref, s := range r.slots {
		sl = append(sl, fmt.Sprintf("%q/%q=%d", fzValid(ref.App), fzValid(ref.ID), s))
	}
	r.mu.RUnlock()
	sort.Strings(ov)
	sort.Strings(sl)
	fmt.Fprintf(&b, "\n  overrides %v\n  slots %v\n  ", ov, sl)
	d, _ := json.Marshal(r.Deployments())
	b.Write(fzNormJSON(d))
	return b.String()
}

func fzValid(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// fzNormJSON re-encodes JSON so that strings that differ only in how
// they were invalid UTF-8 compare equal.
func fzNormJSON(b []byte) []byte {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return b
	}
	out, err := json.Marshal(v)
	if err != nil {
		return b
	}
	return out
}
