package registryapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/registry/registryapi/wiretest"
)

// FuzzDecodeInstanceJSON: decoding never panics; what decodes and
// validates survives encoding and decoding again.
func FuzzDecodeInstanceJSON(f *testing.F) {
	for _, s := range wiretest.InstanceJSONSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		defer wiretest.Watchdog(t)()
		in, err := DecodeInstanceJSON(body)
		if err != nil {
			return
		}
		if in == nil {
			t.Fatal("DecodeInstanceJSON returned neither an instance nor an error")
		}
		if err := in.Validate(in.App); err != nil {
			return
		}
		fzRoundTrip(t, in, EncodeInstanceJSON, DecodeInstanceJSON, false)
	})
}

// FuzzDecodeInstanceJSONAsEncodingJSON: the token walker that reads a
// registration reads what encoding/json, reflecting over the same struct
// tags, read before it: the same instance, or an error from both.
func FuzzDecodeInstanceJSONAsEncodingJSON(f *testing.F) {
	for _, s := range wiretest.InstanceJSONSeeds {
		f.Add([]byte(s))
	}
	// jsonInInstanceByTags has the fields and tags of jsonInInstance, not
	// its UnmarshalJSON: encoding/json reflects over it.
	type jsonInInstanceByTags jsonInInstance
	f.Fuzz(func(t *testing.T, body []byte) {
		defer wiretest.Watchdog(t)()
		got, err := DecodeInstanceJSON(body)
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
	for _, s := range wiretest.InstanceXMLSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		defer wiretest.Watchdog(t)()
		in, err := DecodeInstanceXML(body)
		if err != nil {
			return
		}
		if in == nil {
			t.Fatal("DecodeInstanceXML returned neither an instance nor an error")
		}
		if err := in.Validate(in.App); err != nil {
			return
		}
		fzRoundTrip(t, in, EncodeInstanceXML, DecodeInstanceXML, true)
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
	if err := out.Validate(in.App); err != nil {
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
	for _, s := range wiretest.AppsJSONSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		defer wiretest.Watchdog(t)()
		apps, err := DecodeAppsJSON(body)
		if err != nil {
			return
		}
		b := EncodeAppsJSON(apps)
		again, err := DecodeAppsJSON(b)
		if err != nil {
			t.Fatalf("decoding the encoded applications: %v\n%s", err, b)
		}
		if got, want := fzShape(again), fzShape(apps); got != want {
			t.Fatalf("applications read back as %s, want %s\n%s", got, want, b)
		}
		if err := wiretest.WellFormedXML(EncodeAppsXML(apps)); err != nil {
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

// FuzzDecodeInstanceParsedAsWalked: the fast path reads what the token
// walker reads, whenever it does not hand the body to the walker.
func FuzzDecodeInstanceParsedAsWalked(f *testing.F) {
	for _, s := range wiretest.InstanceJSONSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		defer wiretest.Watchdog(t)()
		got, ok := decodeInstanceParsed(body)
		if !ok {
			return
		}
		want, err := decodeInstanceWalked(body)
		if err != nil {
			t.Fatalf("%q: the fast path read %+v, the walker refused: %v", body, got, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n fast path %+v\n walker    %+v", body, got, want)
		}
	})
}
