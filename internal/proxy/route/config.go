package route

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shardctl/shardctl/internal/credential"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/yamlfile"
)

// FileConfig is the proxy's YAML configuration file:
//
//	listen: 127.0.0.1:26500
//	restListen: 127.0.0.1:8080
//	admin: 127.0.0.1:9700
//	front: frames
//	legacyShard: blue-0
//	maxInflightPerShard: 1000
//	overloadLimit: 200
//	overloadExcess: 50
//	maxBacklog: 1000
//	instanceLimit: 0
//	queueTarget: 250ms
//	backlogInterval: 1s
//	coolingOff: 30s
//	deployTimeout: 30s
//	health: {interval: 2s, timeout: 1s, unhealthyAfter: 2, healthyAfter: 2,
//	         outlierFailures: 5, ejectionTime: 30s, maxEjectionPercent: 50}
//	clients: {maxConnections: 10000, handshakeTimeout: 10s, idleTimeout: 1h, keepAlive: 1m, resetBudget: 200, cooldown: 10s, outputLimit: 4194304}
//	tls: {cert: /etc/shardctl/tls.crt, key: /etc/shardctl/tls.key, clientCA: /etc/shardctl/ca.crt}
//	upstreamCA: /etc/shardctl/zeebe-ca.crt
//	registryCA: /etc/shardctl/registry-ca.crt
//	credentials:
//	  default: {tokenURL: https://login.example/oauth/token, clientID: shardctl-proxy,
//	            clientSecretFile: /etc/shardctl/client-secret, audience: zeebe-api}
//	  eu: {tokenFile: /etc/shardctl/eu-token}
//	shards:
//	- {id: blue-0, address: 10.0.0.5:26500, slot: 1}
//	- {id: green-1, address: 10.0.1.5:26500, slot: 2, state: DRAINING, tls: "true", credential: eu}
type FileConfig struct {
	Listen              string      `json:"listen"`
	RESTListen          string      `json:"restListen"`
	SearchTimeout       string      `json:"searchTimeout"`
	SearchPartial       *bool       `json:"searchPartial"`
	Admin               string      `json:"admin"`
	Front               string      `json:"front"`
	LegacyShard         string      `json:"legacyShard"`
	MaxInflightPerShard *int64      `json:"maxInflightPerShard"`
	OverloadLimit       *int64      `json:"overloadLimit"`
	OverloadExcess      *int        `json:"overloadExcess"`
	MaxBacklog          *int64      `json:"maxBacklog"`
	InstanceLimit       *int64      `json:"instanceLimit"`
	QueueTarget         string      `json:"queueTarget"`
	BacklogInterval     string      `json:"backlogInterval"`
	CoolingOff          string      `json:"coolingOff"`
	DeployTimeout       string      `json:"deployTimeout"`
	Health              FileHealth  `json:"health"`
	Clients             FileClients `json:"clients"`
	TLS                 FileTLS     `json:"tls"`
	// AdminTLS and AdminTokenFile are --admin-tls-cert, --admin-tls-key
	// and --admin-token-file.
	AdminTLS       FileTLS `json:"adminTLS"`
	AdminTokenFile string  `json:"adminTokenFile"`
	UpstreamCA     string  `json:"upstreamCA"`
	// RegistryCA, RegistryCert and RegistryKey are --registry-ca,
	// --registry-cert and --registry-key: an https registry's CA, and the
	// client certificate it may ask for.
	RegistryCA   string `json:"registryCA"`
	RegistryCert string `json:"registryCert"`
	RegistryKey  string `json:"registryKey"`
	// Credentials are the proxy's own credentials for shards, by name
	// (see Config.Credentials).
	Credentials map[string]credential.Config `json:"credentials"`
	Shards      []proxyapi.ShardConfig       `json:"shards"`
}

// FileTLS is the file's tls section: the clients' listener.
type FileTLS struct {
	Cert     string `json:"cert"`
	Key      string `json:"key"`
	ClientCA string `json:"clientCA"`
}

// FileClients is the file's clients section (ClientLimits).
type FileClients struct {
	MaxConnections   *int   `json:"maxConnections"`
	HandshakeTimeout string `json:"handshakeTimeout"`
	IdleTimeout      string `json:"idleTimeout"`
	KeepAlive        string `json:"keepAlive"`
	ResetBudget      *int   `json:"resetBudget"`
	Cooldown         string `json:"cooldown"`
	OutputLimit      *int   `json:"outputLimit"`
}

// FileHealth is the file's health section (HealthConfig); what it leaves
// out keeps its default.
type FileHealth struct {
	Interval           string `json:"interval"`
	Timeout            string `json:"timeout"`
	UnhealthyAfter     *int   `json:"unhealthyAfter"`
	HealthyAfter       *int   `json:"healthyAfter"`
	OutlierFailures    *int   `json:"outlierFailures"`
	EjectionTime       string `json:"ejectionTime"`
	MaxEjectionPercent *int   `json:"maxEjectionPercent"`
}

// LoadFile reads a configuration file; unknown fields are errors, so a
// typo does not silently fall back to a default.
func LoadFile(path string) (FileConfig, error) {
	var fc FileConfig
	if err := yamlfile.Read(path, &fc); err != nil {
		return fc, fmt.Errorf("proxy config: %w", err)
	}
	for field, v := range map[string]string{"coolingOff": fc.CoolingOff, "health.interval": fc.Health.Interval,
		"health.timeout": fc.Health.Timeout, "health.ejectionTime": fc.Health.EjectionTime, "backlogInterval": fc.BacklogInterval, "searchTimeout": fc.SearchTimeout, "deployTimeout": fc.DeployTimeout,
		"clients.handshakeTimeout": fc.Clients.HandshakeTimeout, "clients.idleTimeout": fc.Clients.IdleTimeout, "clients.keepAlive": fc.Clients.KeepAlive, "clients.cooldown": fc.Clients.Cooldown} {
		if v == "" {
			continue
		}
		if _, err := time.ParseDuration(v); err != nil {
			return fc, fmt.Errorf("proxy config %s: %s %q: %w", path, field, v, err)
		}
	}
	return fc, nil
}

// ParseShardFlag reads --shard ID=HOST:PORT[,slot=N][,state=S][,pool=P][,metrics=URL][,rest=URL][,tls=T][,credential=C][,tenant=NAME]...;
// without a slot the shard gets position (1-based) as its slot; each
// tenant= adds a physical tenant it serves (none: "default" only).
func ParseShardFlag(v string, position int) (proxyapi.ShardConfig, error) {
	id, rest, ok := strings.Cut(v, "=")
	if !ok || id == "" || rest == "" {
		return proxyapi.ShardConfig{}, fmt.Errorf("--shard %q: want ID=HOST:PORT[,slot=N][,state=UP|DRAINING|OUT_OF_SERVICE][,pool=NAME][,metrics=URL][,rest=URL][,tls=true|insecure][,credential=NAME][,tenant=NAME] (tenant= repeatable)", v)
	}
	parts := strings.Split(rest, ",")
	sc := proxyapi.ShardConfig{ID: id, Addr: parts[0], Slot: position}
	for _, opt := range parts[1:] {
		k, val, _ := strings.Cut(opt, "=")
		switch k {
		case "slot":
			n, err := strconv.Atoi(val)
			if err != nil {
				return sc, fmt.Errorf("--shard %q: slot %q is not a number", v, val)
			}
			sc.Slot = n
		case "state":
			st, err := proxyapi.ParseState(val)
			if err != nil {
				return sc, fmt.Errorf("--shard %q: %w", v, err)
			}
			sc.State = st
		case "pool":
			sc.Pool = val
		case "metrics":
			sc.Metrics = val
		case "rest":
			sc.REST = val
		case "tls":
			sc.TLS = val
		case "credential":
			sc.Credential = val
		case "tenant":
			if !slices.Contains(sc.PhysicalTenants, val) {
				sc.PhysicalTenants = append(sc.PhysicalTenants, val)
			}
		default:
			return sc, fmt.Errorf("--shard %q: unknown option %q (slot=N, state=S, pool=P, metrics=URL, rest=URL, tls=true|insecure, credential=NAME or tenant=NAME)", v, k)
		}
	}
	return sc, validateShard(sc)
}
