package registryapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/valyala/fastjson"
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
	if !f.parse(s) {
		return fmt.Errorf("expected a number, got %.40s", string(b))
	}
	return nil
}

func (f *flexInt) parse(s string) bool {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		*f = flexInt(n)
		return true
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return false
	}
	*f = flexInt(n)
	return true
}

func (f *flexInt) fromValue(v *fastjson.Value) bool {
	switch v.Type() {
	case fastjson.TypeNull:
		return true
	case fastjson.TypeNumber:
		return f.parse(rawText(v))
	case fastjson.TypeString:
		s := strings.TrimSpace(string(v.GetStringBytes()))
		return s == "" || f.parse(s)
	}
	return false
}

// rawText is a number, true or false as the body wrote it.
func rawText(v *fastjson.Value) string {
	var buf [32]byte
	return string(v.MarshalTo(buf[:0]))
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
	if !f.parse(s) {
		return fmt.Errorf("expected true or false, got %.40s", string(b))
	}
	return nil
}

func (f *flexBool) parse(s string) bool {
	v, err := strconv.ParseBool(strings.TrimSpace(s))
	if err == nil {
		*f = flexBool(v)
	}
	return err == nil
}

func (f *flexBool) fromValue(v *fastjson.Value) bool {
	switch v.Type() {
	case fastjson.TypeNull:
		return true
	case fastjson.TypeString:
		return f.parse(string(v.GetStringBytes()))
	case fastjson.TypeNumber, fastjson.TypeTrue, fastjson.TypeFalse:
		return f.parse(rawText(v))
	}
	return false
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

// fromValue reads a parsed scalar; an object or an array, kept as the
// body wrote it, is the walker's (false).
func (f *flexString) fromValue(v *fastjson.Value) bool {
	switch v.Type() {
	case fastjson.TypeNull:
		return true
	case fastjson.TypeString:
		*f = flexString(v.GetStringBytes())
		return true
	case fastjson.TypeNumber, fastjson.TypeTrue, fastjson.TypeFalse:
		*f = flexString(rawText(v))
		return true
	}
	return false
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
	if in, ok := decodeInstanceParsed(b); ok {
		return in, nil
	}
	return decodeInstanceWalked(b)
}

// decodeInstanceWalked is DecodeInstanceJSON by the token walker, which
// reads every body as encoding/json would.
func decodeInstanceWalked(b []byte) (*Instance, error) {
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

// decodeInstanceParsed is DecodeInstanceJSON's fast path: a body parsed
// whole by fastjson (a third of the walker's cost), then read field by
// field with the walker's rules. Whatever it is not sure to read as the
// walker does, it leaves to the walker (false): a body fastjson or its
// strict validation refuses, invalid UTF-8 or \u escapes (encoding/json
// turns bad ones into U+FFFD), an object or array where a scalar goes,
// any value the walker would refuse.
func decodeInstanceParsed(b []byte) (*Instance, bool) {
	if !utf8.Valid(b) || bytes.Contains(b, []byte(`\u`)) {
		return nil, false
	}
	p := parsers.Get()
	defer parsers.Put(p)
	v, err := p.ParseBytes(b)
	if err != nil || fastjson.ValidateBytes(b) != nil || v.Type() != fastjson.TypeObject {
		return nil, false
	}
	var w *jsonInInstance
	ok := valueObject(v, func(name []byte, iv *fastjson.Value) bool {
		switch {
		case !strings.EqualFold(string(name), "instance"):
			return true
		case iv.Type() == fastjson.TypeNull:
			w = nil
			return true
		case iv.Type() != fastjson.TypeObject:
			return false
		}
		if w == nil {
			w = &jsonInInstance{}
		}
		return valueFields(iv, w, instanceFields)
	})
	if !ok || w == nil {
		return nil, false
	}
	return w.instance(), true
}

var parsers fastjson.ParserPool

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

// jsonField is a field of T: its JSON name and how its value is read,
// from the token walker and from a parsed value (fastValue).
type jsonField[T any] struct {
	name  string
	read  func(*T, *jsontext.Decoder) error
	value func(*T, *fastjson.Value) bool
}

// fieldIndex finds a field as encoding/json does: the exact name, else
// the first field that differs only in case; -1 for none.
func fieldIndex[T any](fields []jsonField[T], name []byte) int {
	for i := range fields {
		if string(name) == fields[i].name {
			return i
		}
	}
	for i := range fields {
		if strings.EqualFold(string(name), fields[i].name) {
			return i
		}
	}
	return -1
}

// jsonFields reads an object into dst; unknown names are skipped.
func jsonFields[T any](d *jsontext.Decoder, what string, dst *T, fields []jsonField[T]) error {
	_, err := jsonObject(d, what, func(name string) error {
		i := fieldIndex(fields, []byte(name))
		if i < 0 {
			return d.SkipValue()
		}
		return fields[i].read(dst, d)
	})
	return err
}

// valueObject is jsonObject over a parsed value: field reads each name's
// value until it says false; null is an absent object. False where the
// walker would fail (the caller then lets the walker say why).
func valueObject(v *fastjson.Value, field func(name []byte, fv *fastjson.Value) bool) bool {
	switch v.Type() {
	case fastjson.TypeNull:
		return true
	case fastjson.TypeObject:
	default:
		return false
	}
	o, _ := v.Object()
	ok := true
	o.Visit(func(name []byte, fv *fastjson.Value) { ok = ok && field(name, fv) })
	return ok
}

// valueFields is jsonFields over a parsed value.
func valueFields[T any](v *fastjson.Value, dst *T, fields []jsonField[T]) bool {
	return valueObject(v, func(name []byte, fv *fastjson.Value) bool {
		i := fieldIndex(fields, name)
		return i < 0 || fields[i].value(dst, fv)
	})
}

// jsonScalar reads the next value into a flex type.
func jsonScalar(d *jsontext.Decoder, dst json.Unmarshaler) error {
	v, err := d.ReadValue()
	if err != nil {
		return err
	}
	return dst.UnmarshalJSON(v)
}

// flexValue is a flex type, read from raw JSON or from a parsed value.
type flexValue interface {
	json.Unmarshaler
	fromValue(*fastjson.Value) bool
}

// scalar is a field of a flex type.
func scalar[T any](name string, at func(*T) flexValue) jsonField[T] {
	return jsonField[T]{name,
		func(t *T, d *jsontext.Decoder) error { return jsonScalar(d, at(t)) },
		func(t *T, v *fastjson.Value) bool { return at(t).fromValue(v) }}
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

// valueStrings is jsonStrings over a parsed value.
func valueStrings(v *fastjson.Value, m *map[string]flexString) bool {
	if v.Type() == fastjson.TypeNull {
		*m = nil
		return true
	}
	return valueObject(v, func(name []byte, fv *fastjson.Value) bool {
		var s flexString
		if !s.fromValue(fv) {
			return false
		}
		if *m == nil {
			*m = map[string]flexString{}
		}
		(*m)[string(name)] = s
		return true
	})
}

func (w *jsonInInstance) read(d *jsontext.Decoder) error {
	return jsonFields(d, "instance", w, instanceFields)
}

// instanceFields are jsonInInstance's, in its order (which decides a
// name that matches two fields but in case).
var instanceFields = []jsonField[jsonInInstance]{
	scalar("instanceId", func(w *jsonInInstance) flexValue { return &w.InstanceID }),
	scalar("hostName", func(w *jsonInInstance) flexValue { return &w.HostName }),
	scalar("app", func(w *jsonInInstance) flexValue { return &w.App }),
	scalar("appGroupName", func(w *jsonInInstance) flexValue { return &w.AppGroupName }),
	scalar("ipAddr", func(w *jsonInInstance) flexValue { return &w.IPAddr }),
	scalar("status", func(w *jsonInInstance) flexValue { return &w.Status }),
	scalar("overriddenStatus", func(w *jsonInInstance) flexValue { return &w.OverriddenStatus }),
	scalar("overriddenstatus", func(w *jsonInInstance) flexValue { return &w.OverriddenStatusOld }),
	{"port", func(w *jsonInInstance, d *jsontext.Decoder) error { return w.Port.read(d) },
		func(w *jsonInInstance, v *fastjson.Value) bool { return w.Port.fromValue(v) }},
	{"securePort", func(w *jsonInInstance, d *jsontext.Decoder) error { return w.SecurePort.read(d) },
		func(w *jsonInInstance, v *fastjson.Value) bool { return w.SecurePort.fromValue(v) }},
	scalar("countryId", func(w *jsonInInstance) flexValue { return &w.CountryID }),
	{"dataCenterInfo", func(w *jsonInInstance, d *jsontext.Decoder) error {
		if d.PeekKind() == 'n' {
			w.DataCenterInfo = nil
			return d.SkipValue()
		}
		if w.DataCenterInfo == nil {
			w.DataCenterInfo = &jsonInDataCenter{}
		}
		return jsonFields(d, "dataCenterInfo", w.DataCenterInfo, dataCenterFields)
	}, func(w *jsonInInstance, v *fastjson.Value) bool {
		if v.Type() == fastjson.TypeNull {
			w.DataCenterInfo = nil
			return true
		}
		if w.DataCenterInfo == nil {
			w.DataCenterInfo = &jsonInDataCenter{}
		}
		return v.Type() == fastjson.TypeObject && valueFields(v, w.DataCenterInfo, dataCenterFields)
	}},
	{"leaseInfo", func(w *jsonInInstance, d *jsontext.Decoder) error {
		return jsonFields(d, "leaseInfo", &w.LeaseInfo, leaseFields)
	}, func(w *jsonInInstance, v *fastjson.Value) bool { return valueFields(v, &w.LeaseInfo, leaseFields) }},
	{"metadata", func(w *jsonInInstance, d *jsontext.Decoder) error { return jsonStrings(d, "metadata", &w.Metadata) },
		func(w *jsonInInstance, v *fastjson.Value) bool { return valueStrings(v, &w.Metadata) }},
	scalar("homePageUrl", func(w *jsonInInstance) flexValue { return &w.HomePageURL }),
	scalar("statusPageUrl", func(w *jsonInInstance) flexValue { return &w.StatusPageURL }),
	scalar("healthCheckUrl", func(w *jsonInInstance) flexValue { return &w.HealthCheckURL }),
	scalar("secureHealthCheckUrl", func(w *jsonInInstance) flexValue { return &w.SecureHealthCheckURL }),
	scalar("vipAddress", func(w *jsonInInstance) flexValue { return &w.VIPAddress }),
	scalar("secureVipAddress", func(w *jsonInInstance) flexValue { return &w.SecureVIPAddress }),
	scalar("isCoordinatingDiscoveryServer", func(w *jsonInInstance) flexValue { return &w.IsCoordinating }),
	scalar("lastUpdatedTimestamp", func(w *jsonInInstance) flexValue { return &w.LastUpdatedTimestamp }),
	scalar("lastDirtyTimestamp", func(w *jsonInInstance) flexValue { return &w.LastDirtyTimestamp }),
	scalar("actionType", func(w *jsonInInstance) flexValue { return &w.ActionType }),
}

var portFields = []jsonField[jsonPort]{
	scalar("$", func(p *jsonPort) flexValue { return &p.Number }),
	scalar("@enabled", func(p *jsonPort) flexValue { return &p.Enabled }),
}

func (p *jsonPort) fromValue(v *fastjson.Value) bool {
	switch v.Type() {
	case fastjson.TypeNull:
		return true
	case fastjson.TypeObject:
		p.given = true
		return valueFields(v, p, portFields)
	}
	p.given, p.Enabled = true, true
	return p.Number.fromValue(v)
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
	scalar("renewalIntervalInSecs", func(l *jsonInLease) flexValue { return &l.RenewalIntervalInSecs }),
	scalar("durationInSecs", func(l *jsonInLease) flexValue { return &l.DurationInSecs }),
	scalar("registrationTimestamp", func(l *jsonInLease) flexValue { return &l.RegistrationTimestamp }),
	scalar("lastRenewalTimestamp", func(l *jsonInLease) flexValue { return &l.LastRenewalTimestamp }),
	scalar("evictionTimestamp", func(l *jsonInLease) flexValue { return &l.EvictionTimestamp }),
	scalar("serviceUpTimestamp", func(l *jsonInLease) flexValue { return &l.ServiceUpTimestamp }),
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
	}, func(c *jsonInDataCenter, v *fastjson.Value) bool {
		switch v.Type() {
		case fastjson.TypeNull:
			return true
		case fastjson.TypeString:
			c.Class = string(v.GetStringBytes())
			return true
		}
		return false
	}},
	scalar("name", func(c *jsonInDataCenter) flexValue { return &c.Name }),
	{"metadata", func(c *jsonInDataCenter, d *jsontext.Decoder) error {
		return jsonStrings(d, "dataCenterInfo metadata", &c.Metadata)
	}, func(c *jsonInDataCenter, v *fastjson.Value) bool { return valueStrings(v, &c.Metadata) }},
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
