package store

import (
	"encoding/json"
	"reflect"
	"testing"

	gojson "github.com/goccy/go-json"

	"github.com/shardctl/shardctl/internal/registry/registryapi"
)

// A replica reads the instances encoding/json wrote with goccy/go-json:
// the same instance as encoding/json reads.
func TestStoredInstanceReadAsEncodingJSONReads(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   registryapi.Instance
	}{
		{"probe's", registryapi.Instance{InstanceID: "14f8ff05-burst1-1", App: "SHARDCTL-PROBE", HostName: "h.probe.invalid", IPAddr: "192.0.2.1",
			Port: 8080, PortEnabled: true, Status: registryapi.StatusUp, VIPAddress: "SHARDCTL-PROBE",
			DataCenterInfo: registryapi.DataCenterInfo{Name: "MyOwn"}, LeaseInfo: registryapi.LeaseInfo{RenewalIntervalInSecs: 300, DurationInSecs: 900}}},
		{"shard with metadata", registryapi.Instance{InstanceID: "blue-1", App: "ZEEBE-SHARDS", HostName: "blue-1", IPAddr: "10.0.0.7", Port: 26500,
			Status: registryapi.StatusOutOfService, OverriddenStatus: registryapi.StatusOutOfService,
			Metadata:  map[string]string{"slot": "3", "pool": "blue", "zone": "eu-1", "state": "DRAINING", "credential": "sre"},
			LeaseInfo: registryapi.LeaseInfo{RegistrationTimestamp: 1764000000123, LastRenewalTimestamp: 1764000001123, ServiceUpTimestamp: 1764000000123}}},
		{"text that JSON escapes", registryapi.Instance{InstanceID: "a<b>&c", App: "Q\"UOTE", HostName: "tab\there\nline",
			HomePageURL: "http://h/?a=1&b=<2>", Metadata: map[string]string{"ünïcode": "日本", "\u2028": "line separator", "ctl": "\x01"}}},
		{"zero", registryapi.Instance{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.Marshal((*storedInstance)(&tc.in))
			if err != nil {
				t.Fatal(err)
			}
			var a, b storedInstance
			if err := gojson.Unmarshal(want, &a); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(want, &b); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(registryapi.Instance(a), tc.in) {
				t.Fatalf("read back:\n goccy %+v\n std   %+v", a, b)
			}
		})
	}
}
