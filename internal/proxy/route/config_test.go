package route

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadFile(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, err string
		check           func(FileConfig) bool
	}{
		{"health", "health: {interval: 500ms, unhealthyAfter: 3, maxEjectionPercent: 25}\nshards: [{id: a, address: 127.0.0.1:1, slot: 1}]\n", "",
			func(fc FileConfig) bool {
				return fc.Health.Interval == "500ms" && *fc.Health.UnhealthyAfter == 3 && *fc.Health.MaxEjectionPercent == 25 &&
					fc.Health.HealthyAfter == nil && len(fc.Shards) == 1
			}},
		{"physical tenants", "shards: [{id: a, address: 127.0.0.1:1, slot: 1, physicalTenants: [default, acme]}]\n", "",
			func(fc FileConfig) bool {
				return len(fc.Shards) == 1 && strings.Join(fc.Shards[0].PhysicalTenants, ",") == "default,acme"
			}},
		{"credentials", "credentials:\n  default: {tokenURL: https://login/t, clientID: p, clientSecretFile: /s, audience: zeebe-api, scopes: [a, b]}\n  eu: {tokenFile: /t}\n" +
			"shards: [{id: a, address: 127.0.0.1:1, slot: 1, credential: eu}]\nregistryCA: /ca\nadminTLS: {cert: /c, key: /k}\nadminTokenFile: /a\n", "",
			func(fc FileConfig) bool {
				d := fc.Credentials["default"]
				return d.TokenURL == "https://login/t" && d.ClientSecretFile == "/s" && d.Audience == "zeebe-api" && len(d.Scopes) == 2 &&
					fc.Credentials["eu"].TokenFile == "/t" && fc.Shards[0].Credential == "eu" && fc.RegistryCA == "/ca" && fc.AdminTLS.Key == "/k" && fc.AdminTokenFile == "/a"
			}},
		{"a secret inline", "credentials:\n  default: {clientID: p, clientSecret: s3cret}\n", `unknown field "clientSecret"`, nil},
		{"a typo", "helth: {interval: 1s}\n", `proxy.yaml:1:1: unknown field "helth"`, nil},
		{"an unknown health field", "health: {intervall: 1s}\n", `unknown field "intervall"`, nil},
		{"a bad duration", "health: {timeout: soon}\n", `health.timeout "soon"`, nil},
		{"a bad cooling-off", "coolingOff: 5\n", `coolingOff "5"`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "proxy.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			fc, err := LoadFile(path)
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want one containing %q", err, tc.err)
			case tc.err == "" && err != nil:
				t.Error(err)
			case tc.check != nil && !tc.check(fc):
				t.Errorf("read %+v", fc)
			}
		})
	}
}

func TestHealthConfigDefaultsAndErrors(t *testing.T) {
	for _, tc := range []struct {
		in   HealthConfig
		want HealthConfig
		err  string
	}{
		{HealthConfig{}, HealthConfig{Interval: 2 * time.Second, Timeout: time.Second, UnhealthyAfter: 2, HealthyAfter: 2, OutlierFailures: 5, EjectionTime: 30 * time.Second, MaxEjectionPercent: 50}, ""},
		{HealthConfig{Interval: 100 * time.Millisecond}, HealthConfig{Interval: 100 * time.Millisecond, Timeout: 100 * time.Millisecond, UnhealthyAfter: 2, HealthyAfter: 2, OutlierFailures: 5, EjectionTime: 30 * time.Second, MaxEjectionPercent: 50}, ""},
		{HealthConfig{Interval: time.Second, Timeout: 2 * time.Second}, HealthConfig{}, "no longer than the interval"},
		{HealthConfig{UnhealthyAfter: -1}, HealthConfig{}, "at least 1"},
		{HealthConfig{MaxEjectionPercent: 101}, HealthConfig{}, "want 1-100"}, {HealthConfig{MaxEjectionPercent: -5}, HealthConfig{}, "want 1-100"},
	} {
		h := tc.in
		err := h.validate()
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%+v: error %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || h != tc.want):
			t.Errorf("%+v: %+v, %v; want %+v", tc.in, h, err, tc.want)
		}
	}
}
