package registryapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Eureka's JSON is loose: clients send numbers as strings, booleans as
// strings, and old servers wrote both. Read every shape; write the one
// Eureka 1.10 writes, which is what clients parse.

// unquote reads a JSON string the decoder has already checked. One
// without escapes is its bytes (the common case, and the register path's
// cost: a nested json.Unmarshal checks the value again and allocates a
// decoder); one with escapes goes through encoding/json.
func unquote(b []byte) (string, error) {
	if inner := b[1 : len(b)-1]; bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), nil
	}
	var s string
	err := json.Unmarshal(b, &s)
	return s, err
}

// flexInt reads a number, or a string holding one.
type flexInt int64

func (f *flexInt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	s := string(b)
	if b[0] == '"' {
		var err error
		if s, err = unquote(b); err != nil {
			return err
		}
		if s = strings.TrimSpace(s); s == "" {
			return nil
		}
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		*f = flexInt(n)
		return nil
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("expected a number, got %.40s", string(b))
	}
	*f = flexInt(n)
	return nil
}

// flexBool reads a boolean, or a string "true"/"false".
type flexBool bool

func (f *flexBool) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	s := string(b)
	if b[0] == '"' {
		var err error
		if s, err = unquote(b); err != nil {
			return err
		}
	}
	v, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("expected true or false, got %.40s", string(b))
	}
	*f = flexBool(v)
	return nil
}

// flexString reads a string, or any scalar as its text; objects and
// arrays are kept as their JSON text.
type flexString string

func (f *flexString) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		return nil
	case b[0] == '"':
		s, err := unquote(b)
		if err != nil {
			return err
		}
		*f = flexString(s)
	default:
		if !json.Valid(b) {
			return fmt.Errorf("invalid JSON value %.40s", string(b))
		}
		*f = flexString(b)
	}
	return nil
}

// jsonPort reads {"$":8080,"@enabled":"true"}, or a bare port number.
type jsonPort struct {
	Number  flexInt
	Enabled flexBool
	given   bool
}

func (p *jsonPort) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return nil
	}
	if b[0] == '{' {
		return readJSON(b, p.read)
	}
	p.given, p.Enabled = true, true
	return p.Number.UnmarshalJSON(b)
}

type jsonInDataCenter struct {
	Class    string                `json:"@class"`
	Name     flexString            `json:"name"`
	Metadata map[string]flexString `json:"metadata"`
}

type jsonInLease struct {
	RenewalIntervalInSecs flexInt `json:"renewalIntervalInSecs"`
	DurationInSecs        flexInt `json:"durationInSecs"`
	RegistrationTimestamp flexInt `json:"registrationTimestamp"`
	LastRenewalTimestamp  flexInt `json:"lastRenewalTimestamp"`
	EvictionTimestamp     flexInt `json:"evictionTimestamp"`
	ServiceUpTimestamp    flexInt `json:"serviceUpTimestamp"`
}

type jsonInInstance struct {
	InstanceID           flexString            `json:"instanceId"`
	HostName             flexString            `json:"hostName"`
	App                  flexString            `json:"app"`
	AppGroupName         flexString            `json:"appGroupName"`
	IPAddr               flexString            `json:"ipAddr"`
	Status               flexString            `json:"status"`
	OverriddenStatus     flexString            `json:"overriddenStatus"`
	OverriddenStatusOld  flexString            `json:"overriddenstatus"`
	Port                 jsonPort              `json:"port"`
	SecurePort           jsonPort              `json:"securePort"`
	CountryID            flexInt               `json:"countryId"`
	DataCenterInfo       *jsonInDataCenter     `json:"dataCenterInfo"`
	LeaseInfo            jsonInLease           `json:"leaseInfo"`
	Metadata             map[string]flexString `json:"metadata"`
	HomePageURL          flexString            `json:"homePageUrl"`
	StatusPageURL        flexString            `json:"statusPageUrl"`
	HealthCheckURL       flexString            `json:"healthCheckUrl"`
	SecureHealthCheckURL flexString            `json:"secureHealthCheckUrl"`
	VIPAddress           flexString            `json:"vipAddress"`
	SecureVIPAddress     flexString            `json:"secureVipAddress"`
	IsCoordinating       flexBool              `json:"isCoordinatingDiscoveryServer"`
	LastUpdatedTimestamp flexInt               `json:"lastUpdatedTimestamp"`
	LastDirtyTimestamp   flexInt               `json:"lastDirtyTimestamp"`
	ActionType           flexString            `json:"actionType"`
}

func (w *jsonInInstance) instance() *Instance {
	in := &Instance{
		InstanceID:                    string(w.InstanceID),
		App:                           string(w.App),
		AppGroupName:                  string(w.AppGroupName),
		HostName:                      string(w.HostName),
		IPAddr:                        string(w.IPAddr),
		Port:                          int(w.Port.Number),
		PortEnabled:                   bool(w.Port.Enabled),
		SecurePort:                    int(w.SecurePort.Number),
		SecurePortEnabled:             bool(w.SecurePort.Enabled),
		CountryID:                     int(w.CountryID),
		Metadata:                      stringMap(w.Metadata),
		HomePageURL:                   string(w.HomePageURL),
		StatusPageURL:                 string(w.StatusPageURL),
		HealthCheckURL:                string(w.HealthCheckURL),
		SecureHealthCheckURL:          string(w.SecureHealthCheckURL),
		VIPAddress:                    string(w.VIPAddress),
		SecureVIPAddress:              string(w.SecureVIPAddress),
		IsCoordinatingDiscoveryServer: bool(w.IsCoordinating),
		LastUpdatedTimestamp:          int64(w.LastUpdatedTimestamp),
		LastDirtyTimestamp:            int64(w.LastDirtyTimestamp),
		ActionType:                    string(w.ActionType),
		LeaseInfo: LeaseInfo{
			RenewalIntervalInSecs: int(w.LeaseInfo.RenewalIntervalInSecs),
			DurationInSecs:        int(w.LeaseInfo.DurationInSecs),
			RegistrationTimestamp: int64(w.LeaseInfo.RegistrationTimestamp),
			LastRenewalTimestamp:  int64(w.LeaseInfo.LastRenewalTimestamp),
			EvictionTimestamp:     int64(w.LeaseInfo.EvictionTimestamp),
			ServiceUpTimestamp:    int64(w.LeaseInfo.ServiceUpTimestamp),
		},
	}
	if w.Status != "" {
		in.Status = ParseStatus(string(w.Status))
	}
	if o := firstNonEmpty(string(w.OverriddenStatus), string(w.OverriddenStatusOld)); o != "" {
		in.OverriddenStatus = ParseStatus(o)
	}
	if !w.Port.given {
		in.PortEnabled = false
	}
	if dc := w.DataCenterInfo; dc != nil {
		in.DataCenterInfo = DataCenterInfo{Class: dc.Class, Name: string(dc.Name), Metadata: stringMap(dc.Metadata)}
		if in.DataCenterInfo.Class == "" {
			// present but without a class: still "given", for validation
			in.DataCenterInfo.Class = "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo"
		}
	}
	return in
}

// stringMap turns decoded metadata into strings, without Jackson's class
// marker.
func stringMap(m map[string]flexString) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if k == "@class" {
			continue
		}
		out[k] = string(v)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// DecodeInstanceJSON reads a register body: {"instance":{…}}. It walks
// the tokens (jsontext) instead of reflecting over structs: registration
// is the registry's hottest write, and encoding/json checks a body once
// whole and again for every field a flex type reads.
func DecodeInstanceJSON(b []byte) (*Instance, error) {
	var w *jsonInInstance
	err := readJSON(b, func(d *jsontext.Decoder) error {
		_, err := jsonObject(d, "body", func(name string) error {
			if !strings.EqualFold(name, "instance") {
				return d.SkipValue()
			}
			if d.PeekKind() == 'n' {
				w = nil
				return d.SkipValue()
			}
			if w == nil {
				w = &jsonInInstance{}
			}
			return w.read(d)
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("malformed JSON: %w", err)
	}
	if w == nil {
		return nil, fmt.Errorf(`expected a JSON body {"instance":{…}}`)
	}
	return w.instance(), nil
}

// readJSON runs read over one JSON value, b, read as encoding/json reads
// it (the last of duplicate names wins, invalid UTF-8 becomes U+FFFD),
// and refuses anything after the value.
func readJSON(b []byte, read func(*jsontext.Decoder) error) error {
	d := jsonDecoders.Get().(*jsontext.Decoder)
	defer jsonDecoders.Put(d)
	d.Reset(bytes.NewReader(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if err := read(d); err != nil {
		return err
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return fmt.Errorf("data after the JSON value")
	}
	return nil
}

var jsonDecoders = sync.Pool{New: func() any { return jsontext.NewDecoder(bytes.NewReader(nil)) }}

// UnmarshalJSON lets encoding/json (a fetch's instances) read an instance
// the way a registration is read.
func (w *jsonInInstance) UnmarshalJSON(b []byte) error { return readJSON(b, w.read) }

// jsonObject reads an object, calling field with each name for it to read
// the value; null is an absent object (false).
func jsonObject(d *jsontext.Decoder, what string, field func(name string) error) (bool, error) {
	switch d.PeekKind() {
	case 'n':
		return false, d.SkipValue()
	case '{':
	default:
		v, err := d.ReadValue()
		if err != nil {
			return false, err
		}
		return false, fmt.Errorf("%s: expected an object, got %.40s", what, v)
	}
	if _, err := d.ReadToken(); err != nil {
		return false, err
	}
	for d.PeekKind() != '}' {
		name, err := d.ReadToken()
		if err != nil {
			return false, err
		}
		if err := field(name.String()); err != nil {
			return false, err
		}
	}
	_, err := d.ReadToken()
	return true, err
}

// jsonField is a field of T: its JSON name and how its value is read.
type jsonField[T any] struct {
	name string
	read func(*T, *jsontext.Decoder) error
}

// jsonFields reads an object into dst, matching names as encoding/json
// does: the exact name, else the first field that differs only in case;
// unknown names are skipped.
func jsonFields[T any](d *jsontext.Decoder, what string, dst *T, fields []jsonField[T]) error {
	_, err := jsonObject(d, what, func(name string) error {
		i := slices.IndexFunc(fields, func(f jsonField[T]) bool { return f.name == name })
		if i < 0 {
			i = slices.IndexFunc(fields, func(f jsonField[T]) bool { return strings.EqualFold(f.name, name) })
		}
		if i < 0 {
			return d.SkipValue()
		}
		return fields[i].read(dst, d)
	})
	return err
}

// jsonScalar reads the next value into a flex type.
func jsonScalar(d *jsontext.Decoder, dst json.Unmarshaler) error {
	v, err := d.ReadValue()
	if err != nil {
		return err
	}
	return dst.UnmarshalJSON(v)
}

// scalar is a field read by jsonScalar.
func scalar[T any](name string, at func(*T) json.Unmarshaler) jsonField[T] {
	return jsonField[T]{name, func(t *T, d *jsontext.Decoder) error { return jsonScalar(d, at(t)) }}
}

// jsonStrings reads an object of scalars (metadata) into m.
func jsonStrings(d *jsontext.Decoder, what string, m *map[string]flexString) error {
	if d.PeekKind() == 'n' {
		*m = nil
		return d.SkipValue()
	}
	_, err := jsonObject(d, what, func(name string) error {
		var v flexString
		if err := jsonScalar(d, &v); err != nil {
			return err
		}
		if *m == nil {
			*m = map[string]flexString{}
		}
		(*m)[name] = v
		return nil
	})
	return err
}

func (w *jsonInInstance) read(d *jsontext.Decoder) error {
	return jsonFields(d, "instance", w, instanceFields)
}

// instanceFields are jsonInInstance's, in its order (which decides a
// name that matches two fields but in case).
var instanceFields = []jsonField[jsonInInstance]{
	scalar("instanceId", func(w *jsonInInstance) json.Unmarshaler { return &w.InstanceID }),
	scalar("hostName", func(w *jsonInInstance) json.Unmarshaler { return &w.HostName }),
	scalar("app", func(w *jsonInInstance) json.Unmarshaler { return &w.App }),
	scalar("appGroupName", func(w *jsonInInstance) json.Unmarshaler { return &w.AppGroupName }),
	scalar("ipAddr", func(w *jsonInInstance) json.Unmarshaler { return &w.IPAddr }),
	scalar("status", func(w *jsonInInstance) json.Unmarshaler { return &w.Status }),
	scalar("overriddenStatus", func(w *jsonInInstance) json.Unmarshaler { return &w.OverriddenStatus }),
	scalar("overriddenstatus", func(w *jsonInInstance) json.Unmarshaler { return &w.OverriddenStatusOld }),
	{"port", func(w *jsonInInstance, d *jsontext.Decoder) error { return w.Port.read(d) }},
	{"securePort", func(w *jsonInInstance, d *jsontext.Decoder) error { return w.SecurePort.read(d) }},
	scalar("countryId", func(w *jsonInInstance) json.Unmarshaler { return &w.CountryID }),
	{"dataCenterInfo", func(w *jsonInInstance, d *jsontext.Decoder) error {
		if d.PeekKind() == 'n' {
			w.DataCenterInfo = nil
			return d.SkipValue()
		}
		if w.DataCenterInfo == nil {
			w.DataCenterInfo = &jsonInDataCenter{}
		}
		return jsonFields(d, "dataCenterInfo", w.DataCenterInfo, dataCenterFields)
	}},
	{"leaseInfo", func(w *jsonInInstance, d *jsontext.Decoder) error {
		return jsonFields(d, "leaseInfo", &w.LeaseInfo, leaseFields)
	}},
	{"metadata", func(w *jsonInInstance, d *jsontext.Decoder) error { return jsonStrings(d, "metadata", &w.Metadata) }},
	scalar("homePageUrl", func(w *jsonInInstance) json.Unmarshaler { return &w.HomePageURL }),
	scalar("statusPageUrl", func(w *jsonInInstance) json.Unmarshaler { return &w.StatusPageURL }),
	scalar("healthCheckUrl", func(w *jsonInInstance) json.Unmarshaler { return &w.HealthCheckURL }),
	scalar("secureHealthCheckUrl", func(w *jsonInInstance) json.Unmarshaler { return &w.SecureHealthCheckURL }),
	scalar("vipAddress", func(w *jsonInInstance) json.Unmarshaler { return &w.VIPAddress }),
	scalar("secureVipAddress", func(w *jsonInInstance) json.Unmarshaler { return &w.SecureVIPAddress }),
	scalar("isCoordinatingDiscoveryServer", func(w *jsonInInstance) json.Unmarshaler { return &w.IsCoordinating }),
	scalar("lastUpdatedTimestamp", func(w *jsonInInstance) json.Unmarshaler { return &w.LastUpdatedTimestamp }),
	scalar("lastDirtyTimestamp", func(w *jsonInInstance) json.Unmarshaler { return &w.LastDirtyTimestamp }),
	scalar("actionType", func(w *jsonInInstance) json.Unmarshaler { return &w.ActionType }),
}

var portFields = []jsonField[jsonPort]{
	scalar("$", func(p *jsonPort) json.Unmarshaler { return &p.Number }),
	scalar("@enabled", func(p *jsonPort) json.Unmarshaler { return &p.Enabled }),
}

// read reads {"$":8080,"@enabled":"true"}, or a bare port number.
func (p *jsonPort) read(d *jsontext.Decoder) error {
	if d.PeekKind() != '{' {
		return jsonScalar(d, p)
	}
	p.given = true
	return jsonFields(d, "port", p, portFields)
}

var leaseFields = []jsonField[jsonInLease]{
	scalar("renewalIntervalInSecs", func(l *jsonInLease) json.Unmarshaler { return &l.RenewalIntervalInSecs }),
	scalar("durationInSecs", func(l *jsonInLease) json.Unmarshaler { return &l.DurationInSecs }),
	scalar("registrationTimestamp", func(l *jsonInLease) json.Unmarshaler { return &l.RegistrationTimestamp }),
	scalar("lastRenewalTimestamp", func(l *jsonInLease) json.Unmarshaler { return &l.LastRenewalTimestamp }),
	scalar("evictionTimestamp", func(l *jsonInLease) json.Unmarshaler { return &l.EvictionTimestamp }),
	scalar("serviceUpTimestamp", func(l *jsonInLease) json.Unmarshaler { return &l.ServiceUpTimestamp }),
}

var dataCenterFields = []jsonField[jsonInDataCenter]{
	{"@class", func(c *jsonInDataCenter, d *jsontext.Decoder) error {
		v, err := d.ReadValue()
		if err != nil || v.Kind() == 'n' {
			return err
		}
		if v.Kind() != '"' {
			return fmt.Errorf("dataCenterInfo @class: expected a string, got %.40s", v)
		}
		c.Class, err = unquote(v)
		return err
	}},
	scalar("name", func(c *jsonInDataCenter) json.Unmarshaler { return &c.Name }),
	{"metadata", func(c *jsonInDataCenter, d *jsontext.Decoder) error {
		return jsonStrings(d, "dataCenterInfo metadata", &c.Metadata)
	}},
}

// DecodeAppsJSON reads a full or delta fetch, single elements or arrays.
func DecodeAppsJSON(b []byte) (*Applications, error) {
	var doc struct {
		Applications struct {
			VersionsDelta flexString      `json:"versions__delta"`
			AppsHashcode  flexString      `json:"apps__hashcode"`
			Application   json.RawMessage `json:"application"`
		} `json:"applications"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("malformed JSON: %w", err)
	}
	out := &Applications{VersionsDelta: string(doc.Applications.VersionsDelta), AppsHashcode: string(doc.Applications.AppsHashcode)}
	var apps []struct {
		Name     string          `json:"name"`
		Instance json.RawMessage `json:"instance"`
	}
	if err := oneOrMany(doc.Applications.Application, &apps); err != nil {
		return nil, err
	}
	for _, a := range apps {
		var ins []jsonInInstance
		if err := oneOrMany(a.Instance, &ins); err != nil {
			return nil, err
		}
		app := Application{Name: a.Name}
		for i := range ins {
			app.Instances = append(app.Instances, ins[i].instance())
		}
		out.Applications = append(out.Applications, app)
	}
	return out, nil
}

// oneOrMany decodes an array, or a single element as an array of one.
func oneOrMany[T any](raw json.RawMessage, dst *[]T) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '[' {
		return json.Unmarshal(raw, dst)
	}
	var one T
	if err := json.Unmarshal(raw, &one); err != nil {
		return err
	}
	*dst = append(*dst, one)
	return nil
}

// Output, in Eureka 1.10's shape.

type jsonOutPort struct {
	Number  int    `json:"$"`
	Enabled string `json:"@enabled"`
}

type jsonOutDataCenter struct {
	Class    string            `json:"@class"`
	Name     string            `json:"name"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

type jsonOutLease struct {
	RenewalIntervalInSecs int   `json:"renewalIntervalInSecs"`
	DurationInSecs        int   `json:"durationInSecs"`
	RegistrationTimestamp int64 `json:"registrationTimestamp"`
	LastRenewalTimestamp  int64 `json:"lastRenewalTimestamp"`
	EvictionTimestamp     int64 `json:"evictionTimestamp"`
	ServiceUpTimestamp    int64 `json:"serviceUpTimestamp"`
}

type jsonOutInstance struct {
	InstanceID           string            `json:"instanceId"`
	HostName             string            `json:"hostName"`
	App                  string            `json:"app"`
	AppGroupName         string            `json:"appGroupName,omitempty"`
	IPAddr               string            `json:"ipAddr"`
	Status               Status            `json:"status"`
	OverriddenStatus     Status            `json:"overriddenStatus"`
	Port                 jsonOutPort       `json:"port"`
	SecurePort           jsonOutPort       `json:"securePort"`
	CountryID            int               `json:"countryId"`
	DataCenterInfo       jsonOutDataCenter `json:"dataCenterInfo"`
	LeaseInfo            jsonOutLease      `json:"leaseInfo"`
	Metadata             any               `json:"metadata"`
	HomePageURL          string            `json:"homePageUrl"`
	StatusPageURL        string            `json:"statusPageUrl"`
	HealthCheckURL       string            `json:"healthCheckUrl"`
	SecureHealthCheckURL string            `json:"secureHealthCheckUrl,omitempty"`
	VIPAddress           string            `json:"vipAddress"`
	SecureVIPAddress     string            `json:"secureVipAddress"`
	IsCoordinating       string            `json:"isCoordinatingDiscoveryServer"`
	LastUpdatedTimestamp string            `json:"lastUpdatedTimestamp"`
	LastDirtyTimestamp   string            `json:"lastDirtyTimestamp"`
	ActionType           string            `json:"actionType,omitempty"`
}

// emptyMetadata is how Jackson writes an empty map; Java clients need it.
var emptyMetadata = map[string]string{"@class": "java.util.Collections$EmptyMap"}

func toJSON(in *Instance) jsonOutInstance {
	var md any = emptyMetadata
	if len(in.Metadata) > 0 {
		md = in.Metadata
	}
	return jsonOutInstance{
		InstanceID:       in.InstanceID,
		HostName:         in.HostName,
		App:              in.App,
		AppGroupName:     in.AppGroupName,
		IPAddr:           in.IPAddr,
		Status:           in.EffectiveStatus(),
		OverriddenStatus: in.OverriddenStatus,
		Port:             jsonOutPort{in.Port, strconv.FormatBool(in.PortEnabled)},
		SecurePort:       jsonOutPort{in.SecurePort, strconv.FormatBool(in.SecurePortEnabled)},
		CountryID:        in.CountryID,
		DataCenterInfo:   jsonOutDataCenter{in.DataCenterInfo.Class, in.DataCenterInfo.Name, in.DataCenterInfo.Metadata},
		LeaseInfo: jsonOutLease{in.LeaseInfo.RenewalIntervalInSecs, in.LeaseInfo.DurationInSecs, in.LeaseInfo.RegistrationTimestamp,
			in.LeaseInfo.LastRenewalTimestamp, in.LeaseInfo.EvictionTimestamp, in.LeaseInfo.ServiceUpTimestamp},
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

type jsonOutApp struct {
	Name     string            `json:"name"`
	Instance []jsonOutInstance `json:"instance"`
}

func toJSONApp(a Application) jsonOutApp {
	out := jsonOutApp{Name: a.Name, Instance: make([]jsonOutInstance, 0, len(a.Instances))}
	for _, in := range a.Instances {
		out.Instance = append(out.Instance, toJSON(in))
	}
	return out
}

func EncodeAppsJSON(apps *Applications) []byte {
	type body struct {
		VersionsDelta string       `json:"versions__delta"`
		AppsHashcode  string       `json:"apps__hashcode"`
		Application   []jsonOutApp `json:"application"`
	}
	b := body{VersionsDelta: apps.VersionsDelta, AppsHashcode: apps.AppsHashcode, Application: make([]jsonOutApp, 0, len(apps.Applications))}
	for _, a := range apps.Applications {
		b.Application = append(b.Application, toJSONApp(a))
	}
	return MustJSON(map[string]body{"applications": b})
}

func EncodeAppJSON(a Application) []byte {
	return MustJSON(map[string]jsonOutApp{"application": toJSONApp(a)})
}

func EncodeInstanceJSON(in *Instance) []byte {
	return MustJSON(map[string]jsonOutInstance{"instance": toJSON(in)})
}

// MustJSON encodes values built of strings, numbers and maps of strings,
// which cannot fail.
func MustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("registry: encode JSON: %v", err))
	}
	return b
}

// InstanceJSON is an instance as an element of an application's list:
// the pieces a registry joins into its cached bodies.
func InstanceJSON(in *Instance) []byte { return MustJSON(toJSON(in)) }
