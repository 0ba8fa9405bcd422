// Package registryapi is the registry's API as its clients and its
// stores see it, with no runtime behind it: Eureka's instances and
// applications with their JSON and XML codecs (lenient where Eureka's
// clients differ), and shardctl's own records — shards, cutovers, watch
// events, the registry's health. The probes, migrate and the commands
// read a registry through it and internal/registry/client without
// linking the registry. It imports nothing of this module but
// internal/ledger.
package registryapi

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Status is an instance's Eureka status.
type Status string

// Eureka's statuses; any other string reads as UNKNOWN.
const (
	StatusUp           Status = "UP"
	StatusDown         Status = "DOWN"
	StatusStarting     Status = "STARTING"
	StatusOutOfService Status = "OUT_OF_SERVICE"
	StatusUnknown      Status = "UNKNOWN"
)

// ParseStatus reads a status as Eureka does: unknown strings are UNKNOWN.
func ParseStatus(s string) Status {
	switch st := Status(strings.ToUpper(strings.TrimSpace(s))); st {
	case StatusUp, StatusDown, StatusStarting, StatusOutOfService, StatusUnknown:
		return st
	}
	return StatusUnknown
}

// Eureka's lease defaults, used when a client sends zero or less.
const (
	DefaultRenewalInterval = 30
	DefaultLeaseDuration   = 90
)

// Instance is one registered instance, in Eureka's fields.
type Instance struct {
	InstanceID       string
	App              string // upper case, as Eureka keeps it
	AppGroupName     string
	HostName         string
	IPAddr           string
	Status           Status
	OverriddenStatus Status // UNKNOWN when there is no override

	Port, SecurePort               int
	PortEnabled, SecurePortEnabled bool

	CountryID      int
	DataCenterInfo DataCenterInfo
	LeaseInfo      LeaseInfo
	Metadata       map[string]string

	HomePageURL, StatusPageURL, HealthCheckURL, SecureHealthCheckURL string
	VIPAddress, SecureVIPAddress                                     string

	IsCoordinatingDiscoveryServer bool
	LastUpdatedTimestamp          int64 // ms
	LastDirtyTimestamp            int64 // ms
	ActionType                    string
}

// DataCenterInfo says where an instance runs: Netflix, Amazon or MyOwn.
type DataCenterInfo struct {
	Class    string
	Name     string
	Metadata map[string]string
}

// LeaseInfo is an instance's lease as Eureka writes it (seconds and ms).
type LeaseInfo struct {
	RenewalIntervalInSecs int
	DurationInSecs        int
	RegistrationTimestamp int64
	LastRenewalTimestamp  int64
	EvictionTimestamp     int64
	ServiceUpTimestamp    int64
}

// Clone copies an instance so that the copy shares no maps.
func (in *Instance) Clone() *Instance {
	c := *in
	c.Metadata = maps.Clone(in.Metadata)
	c.DataCenterInfo.Metadata = maps.Clone(in.DataCenterInfo.Metadata)
	return &c
}

// EffectiveStatus is what readers see: an operator's override wins over
// what the instance says of itself.
func (in *Instance) EffectiveStatus() Status {
	if in.OverriddenStatus != "" && in.OverriddenStatus != StatusUnknown {
		return in.OverriddenStatus
	}
	return in.Status
}

// Validate checks what Eureka's register checks, in its order, and fills
// Eureka's defaults; app is the application named by the path.
func (in *Instance) Validate(app string) error {
	switch {
	case in.InstanceID == "" && in.HostName == "":
		return fmt.Errorf("missing instanceId and hostName: one of them identifies the instance")
	case in.IPAddr == "":
		return fmt.Errorf("missing ipAddr")
	case in.App == "":
		return fmt.Errorf("missing app")
	case !strings.EqualFold(in.App, app):
		return fmt.Errorf("mismatched app: the path names %s, the body %s", app, in.App)
	case in.DataCenterInfo.Name == "" && in.DataCenterInfo.Class == "":
		return fmt.Errorf("missing dataCenterInfo")
	case in.DataCenterInfo.Name == "":
		return fmt.Errorf("missing dataCenterInfo name")
	}
	if in.InstanceID == "" {
		in.InstanceID = in.HostName
	}
	if err := CheckName("instanceId", in.InstanceID); err != nil {
		return err
	}
	if err := CheckName("app", in.App); err != nil {
		return err
	}
	for k, v := range in.Metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("metadata %q: keys and values must be UTF-8", k)
		}
	}
	if l := in.LeaseInfo; l.DurationInSecs > maxLeaseSecs || l.RenewalIntervalInSecs > maxLeaseSecs {
		return fmt.Errorf("leaseInfo durationInSecs %d, renewalIntervalInSecs %d: at most %d (a year); metadata %s=true makes a registration that never expires",
			l.DurationInSecs, l.RenewalIntervalInSecs, maxLeaseSecs, MetaStatic)
	}
	in.App = strings.ToUpper(in.App)
	if in.Status == "" {
		in.Status = StatusUp
	}
	if in.OverriddenStatus == "" {
		in.OverriddenStatus = StatusUnknown
	}
	if in.LeaseInfo.RenewalIntervalInSecs <= 0 {
		in.LeaseInfo.RenewalIntervalInSecs = DefaultRenewalInterval
	}
	if in.LeaseInfo.DurationInSecs <= 0 {
		in.LeaseInfo.DurationInSecs = DefaultLeaseDuration
	}
	if in.CountryID == 0 {
		in.CountryID = 1
	}
	return nil
}

func formatMillis(ms int64) string { return strconv.FormatInt(ms, 10) }

// maxLeaseSecs bounds lease times: longer ones overflow time arithmetic
// and JSON's years.
const maxLeaseSecs = 365 * 24 * 3600

// maxNameLen bounds ids and app names: they are store keys and URL path
// segments.
const maxNameLen = 1024

// CheckName rejects ids and app names that could not be used safely as a
// store key or a URL path segment.
func CheckName(field, s string) error {
	switch {
	case len(s) > maxNameLen:
		return fmt.Errorf("%s is %d bytes long: at most %d", field, len(s), maxNameLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s %q is not UTF-8", field, s)
	case s == "." || s == "..":
		return fmt.Errorf("%s %q cannot be a URL path segment", field, s)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s %q holds a control character", field, s)
		}
	}
	return nil
}
