package registryapi

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Eureka's XML (XStream): ports carry an enabled attribute, the data
// center and empty metadata a class attribute, metadata entries are
// elements named by their keys.

type xmlPort struct {
	Number  string `xml:",chardata"`
	Enabled string `xml:"enabled,attr,omitempty"`
}

type xmlDataCenter struct {
	Class    string `xml:"class,attr,omitempty"`
	Name     string `xml:"name"`
	Metadata xmlMap `xml:"metadata"`
}

type xmlLease struct {
	RenewalIntervalInSecs string `xml:"renewalIntervalInSecs"`
	DurationInSecs        string `xml:"durationInSecs"`
	RegistrationTimestamp string `xml:"registrationTimestamp"`
	LastRenewalTimestamp  string `xml:"lastRenewalTimestamp"`
	EvictionTimestamp     string `xml:"evictionTimestamp"`
	ServiceUpTimestamp    string `xml:"serviceUpTimestamp"`
}

type xmlInstance struct {
	XMLName              xml.Name       `xml:"instance"`
	InstanceID           string         `xml:"instanceId"`
	HostName             string         `xml:"hostName"`
	App                  string         `xml:"app"`
	AppGroupName         string         `xml:"appGroupName,omitempty"`
	IPAddr               string         `xml:"ipAddr"`
	Status               string         `xml:"status"`
	OverriddenStatus     string         `xml:"overriddenstatus"`
	OverriddenStatusNew  string         `xml:"overriddenStatus,omitempty"`
	Port                 *xmlPort       `xml:"port"`
	SecurePort           *xmlPort       `xml:"securePort"`
	CountryID            string         `xml:"countryId"`
	DataCenterInfo       *xmlDataCenter `xml:"dataCenterInfo"`
	LeaseInfo            xmlLease       `xml:"leaseInfo"`
	Metadata             xmlMap         `xml:"metadata"`
	HomePageURL          string         `xml:"homePageUrl"`
	StatusPageURL        string         `xml:"statusPageUrl"`
	HealthCheckURL       string         `xml:"healthCheckUrl"`
	SecureHealthCheckURL string         `xml:"secureHealthCheckUrl,omitempty"`
	VIPAddress           string         `xml:"vipAddress"`
	SecureVIPAddress     string         `xml:"secureVipAddress"`
	IsCoordinating       string         `xml:"isCoordinatingDiscoveryServer"`
	LastUpdatedTimestamp string         `xml:"lastUpdatedTimestamp"`
	LastDirtyTimestamp   string         `xml:"lastDirtyTimestamp"`
	ActionType           string         `xml:"actionType,omitempty"`
}

// xmlMap is a map written as one element per key.
type xmlMap struct {
	Class string
	M     map[string]string
}

func (m *xmlMap) UnmarshalXML(d *xml.Decoder, start xml.StartElement) error {
	for _, a := range start.Attr {
		if a.Name.Local == "class" {
			m.Class = a.Value
		}
	}
	for {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			var v string
			if err := d.DecodeElement(&v, &t); err != nil {
				return err
			}
			if m.M == nil {
				m.M = map[string]string{}
			}
			m.M[t.Name.Local] = v
		case xml.EndElement:
			return nil
		}
	}
}

func (m xmlMap) MarshalXML(e *xml.Encoder, start xml.StartElement) error {
	if len(m.M) == 0 {
		if m.Class == "" {
			return nil
		}
		start.Attr = append(start.Attr, xml.Attr{Name: xml.Name{Local: "class"}, Value: m.Class})
		return e.EncodeElement("", start)
	}
	if err := e.EncodeToken(start); err != nil {
		return err
	}
	keys := make([]string, 0, len(m.M))
	for k := range m.M {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !validXMLName(k) {
			continue // a key JSON allowed that XML cannot name
		}
		if err := e.EncodeElement(m.M[k], xml.StartElement{Name: xml.Name{Local: k}}); err != nil {
			return err
		}
	}
	return e.EncodeToken(start.End())
}

func validXMLName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		letter := r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || !(r == '-' || r == '.' || r >= '0' && r <= '9')) {
			return false
		}
	}
	return !strings.HasPrefix(strings.ToLower(s), "xml")
}

// lenientInt reads a number that may be blank or padded.
func lenientInt(s string) int64 {
	n, _ := strconv.ParseFloat(strings.TrimSpace(s), 64)
	return int64(n)
}

func lenientBool(s string) bool {
	v, _ := strconv.ParseBool(strings.TrimSpace(s))
	return v
}

func (w *xmlInstance) instance() *Instance {
	in := &Instance{
		InstanceID:                    strings.TrimSpace(w.InstanceID),
		App:                           strings.TrimSpace(w.App),
		AppGroupName:                  w.AppGroupName,
		HostName:                      strings.TrimSpace(w.HostName),
		IPAddr:                        strings.TrimSpace(w.IPAddr),
		CountryID:                     int(lenientInt(w.CountryID)),
		Metadata:                      w.Metadata.M,
		HomePageURL:                   w.HomePageURL,
		StatusPageURL:                 w.StatusPageURL,
		HealthCheckURL:                w.HealthCheckURL,
		SecureHealthCheckURL:          w.SecureHealthCheckURL,
		VIPAddress:                    w.VIPAddress,
		SecureVIPAddress:              w.SecureVIPAddress,
		IsCoordinatingDiscoveryServer: lenientBool(w.IsCoordinating),
		LastUpdatedTimestamp:          lenientInt(w.LastUpdatedTimestamp),
		LastDirtyTimestamp:            lenientInt(w.LastDirtyTimestamp),
		ActionType:                    w.ActionType,
		LeaseInfo: LeaseInfo{
			RenewalIntervalInSecs: int(lenientInt(w.LeaseInfo.RenewalIntervalInSecs)),
			DurationInSecs:        int(lenientInt(w.LeaseInfo.DurationInSecs)),
			RegistrationTimestamp: lenientInt(w.LeaseInfo.RegistrationTimestamp),
			LastRenewalTimestamp:  lenientInt(w.LeaseInfo.LastRenewalTimestamp),
			EvictionTimestamp:     lenientInt(w.LeaseInfo.EvictionTimestamp),
			ServiceUpTimestamp:    lenientInt(w.LeaseInfo.ServiceUpTimestamp),
		},
	}
	if s := strings.TrimSpace(w.Status); s != "" {
		in.Status = ParseStatus(s)
	}
	if o := firstNonEmpty(strings.TrimSpace(w.OverriddenStatus), strings.TrimSpace(w.OverriddenStatusNew)); o != "" {
		in.OverriddenStatus = ParseStatus(o)
	}
	if p := w.Port; p != nil {
		in.Port, in.PortEnabled = int(lenientInt(p.Number)), p.Enabled == "" || lenientBool(p.Enabled)
	}
	if p := w.SecurePort; p != nil {
		in.SecurePort, in.SecurePortEnabled = int(lenientInt(p.Number)), lenientBool(p.Enabled)
	}
	if dc := w.DataCenterInfo; dc != nil {
		in.DataCenterInfo = DataCenterInfo{Class: dc.Class, Name: strings.TrimSpace(dc.Name), Metadata: dc.Metadata.M}
		if in.DataCenterInfo.Class == "" {
			in.DataCenterInfo.Class = "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo"
		}
	}
	return in
}

// DecodeInstanceXML reads a register body: <instance>…</instance>.
func DecodeInstanceXML(b []byte) (*Instance, error) {
	var w xmlInstance
	d := xml.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&w); err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("expected an XML body <instance>…</instance>")
		}
		return nil, fmt.Errorf("malformed XML: %w", err)
	}
	return w.instance(), nil
}

func toXML(in *Instance) xmlInstance {
	md := xmlMap{M: in.Metadata}
	if len(md.M) == 0 {
		md.Class = "java.util.Collections$EmptyMap"
	}
	return xmlInstance{
		InstanceID:       in.InstanceID,
		HostName:         in.HostName,
		App:              in.App,
		AppGroupName:     in.AppGroupName,
		IPAddr:           in.IPAddr,
		Status:           string(in.EffectiveStatus()),
		OverriddenStatus: string(in.OverriddenStatus),
		Port:             &xmlPort{strconv.Itoa(in.Port), strconv.FormatBool(in.PortEnabled)},
		SecurePort:       &xmlPort{strconv.Itoa(in.SecurePort), strconv.FormatBool(in.SecurePortEnabled)},
		CountryID:        strconv.Itoa(in.CountryID),
		DataCenterInfo:   &xmlDataCenter{Class: in.DataCenterInfo.Class, Name: in.DataCenterInfo.Name, Metadata: xmlMap{M: in.DataCenterInfo.Metadata}},
		LeaseInfo: xmlLease{
			RenewalIntervalInSecs: strconv.Itoa(in.LeaseInfo.RenewalIntervalInSecs),
			DurationInSecs:        strconv.Itoa(in.LeaseInfo.DurationInSecs),
			RegistrationTimestamp: formatMillis(in.LeaseInfo.RegistrationTimestamp),
			LastRenewalTimestamp:  formatMillis(in.LeaseInfo.LastRenewalTimestamp),
			EvictionTimestamp:     formatMillis(in.LeaseInfo.EvictionTimestamp),
			ServiceUpTimestamp:    formatMillis(in.LeaseInfo.ServiceUpTimestamp),
		},
		Metadata:             md,
		HomePageURL:          in.HomePageURL,
		StatusPageURL:        in.StatusPageURL,
		HealthCheckURL:       in.HealthCheckURL,
		SecureHealthCheckURL: in.SecureHealthCheckURL,
		VIPAddress:           in.VIPAddress,
		SecureVIPAddress:     in.SecureVIPAddress,
		IsCoordinating:       strconv.FormatBool(in.IsCoordinatingDiscoveryServer),
		LastUpdatedTimestamp: formatMillis(in.LastUpdatedTimestamp),
		LastDirtyTimestamp:   formatMillis(in.LastDirtyTimestamp),
		ActionType:           in.ActionType,
	}
}

type xmlApp struct {
	XMLName  xml.Name      `xml:"application"`
	Name     string        `xml:"name"`
	Instance []xmlInstance `xml:"instance"`
}

func toXMLApp(a Application) xmlApp {
	out := xmlApp{Name: a.Name}
	for _, in := range a.Instances {
		out.Instance = append(out.Instance, toXML(in))
	}
	return out
}

func EncodeAppsXML(apps *Applications) []byte {
	type body struct {
		XMLName       xml.Name `xml:"applications"`
		VersionsDelta string   `xml:"versions__delta"`
		AppsHashcode  string   `xml:"apps__hashcode"`
		Application   []xmlApp `xml:"application"`
	}
	b := body{VersionsDelta: apps.VersionsDelta, AppsHashcode: apps.AppsHashcode}
	for _, a := range apps.Applications {
		b.Application = append(b.Application, toXMLApp(a))
	}
	return mustXML(b)
}

func EncodeAppXML(a Application) []byte { return mustXML(toXMLApp(a)) }

func EncodeInstanceXML(in *Instance) []byte { return mustXML(toXML(in)) }

// mustXML is a document: the XML declaration, then v.
func mustXML(v any) []byte {
	return append([]byte(xml.Header[:len(xml.Header)-1]), xmlBytes(v)...)
}

// xmlBytes encodes values built of strings, numbers and maps of strings,
// which cannot fail.
func xmlBytes(v any) []byte {
	b, err := xml.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("registry: encode XML: %v", err))
	}
	return b
}

// AppXML is an application's element without the XML header: the piece a
// registry joins into its cached bodies.
func AppXML(a Application) []byte { return xmlBytes(toXMLApp(a)) }

// DecodeAppsXML reads a full or delta fetch in XML as a registry wrote
// it: ids and action types as written, not trimmed as a registration is.
func DecodeAppsXML(b []byte) (*Applications, error) {
	var doc struct {
		XMLName       xml.Name `xml:"applications"`
		VersionsDelta string   `xml:"versions__delta"`
		AppsHashcode  *string  `xml:"apps__hashcode"`
		Application   []xmlApp `xml:"application"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("malformed XML: %w", err)
	}
	if doc.AppsHashcode == nil {
		return nil, errors.New("no apps__hashcode")
	}
	out := &Applications{VersionsDelta: doc.VersionsDelta, AppsHashcode: *doc.AppsHashcode}
	for _, a := range doc.Application {
		app := Application{Name: a.Name}
		for i := range a.Instance {
			w := a.Instance[i]
			in := w.instance()
			in.InstanceID = w.InstanceID
			in.ActionType = w.ActionType
			app.Instances = append(app.Instances, in)
		}
		out.Applications = append(out.Applications, app)
	}
	return out, nil
}
