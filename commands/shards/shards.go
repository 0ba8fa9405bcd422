package shards

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/commands/output"
	"github.com/shardctl/shardctl/completions"
	"github.com/shardctl/shardctl/internal/proxy/proxyapi"
	"github.com/shardctl/shardctl/internal/registry/registryapi"
	"github.com/shardctl/shardctl/internal/registry/registryclient"
	"github.com/shardctl/shardctl/probes/proxies"
)

// NewCmdShards builds `shardctl shards`.
func NewCmdShards(g *cmdutil.Globals) *cobra.Command {
	f := &cmdutil.RegistryFlags{Globals: g}
	cmd := &cobra.Command{
		Use:   "shards",
		Short: "List, register and drain shards in the registry",
		Long: `Read and change the shards the registry knows: their address, slot, pool
and state. State changes return at once ("shardctl drain" waits for a shard
to empty). The registry is --registry (env SHARDCTL_REGISTRY); writes send
the bearer token of --token-file or env SHARDCTL_REGISTRY_TOKEN.

States: UP takes everything; DRAINING takes no new instances but serves jobs
and keyed calls; OUT_OF_SERVICE takes nothing new; DOWN is unreachable or
reported down. Eureka clients see DRAINING as OUT_OF_SERVICE.`,
		GroupID: cmdutil.GroupOperate,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return cmdutil.Usagef("missing subcommand: use list, get, register, deregister, drain or undrain")
		},
	}
	f.AddFlags(cmd.PersistentFlags())
	cmd.AddCommand(newCmdShardsList(f), newCmdShardsGet(f), newCmdShardsRegister(f), newCmdShardsDeregister(f),
		newCmdShardsState(f, "drain", registryapi.StateDraining, "Set a shard DRAINING: no new instances, jobs and keyed calls still served"),
		newCmdShardsState(f, "undrain", registryapi.StateUp, "Set a shard UP again (removes DRAINING or OUT_OF_SERVICE)"))
	return cmd
}

// shardList is `shards list`: the shards and the registry's own state.
type shardList struct {
	Registry registryapi.Health  `json:"registry"`
	Shards   []registryapi.Shard `json:"shards"`
	// Proxies are what each registered proxy sees of the shards.
	Proxies []proxies.View `json:"proxies,omitempty"`
	// Unregistered are the shards the proxies still route to that the
	// registry no longer lists (evicted, their keys outstanding).
	Unregistered []proxyapi.ShardStatus `json:"unregistered,omitempty"`
}

var shardHeader = []string{"ID", "SLOT", "POOL", "STATE", "ADDRESS", "RENEWED"}

func (shardList) Header(wide bool) []string {
	h := shardColumns(wide)
	if wide {
		h = append(h, "PROXIES")
	}
	return h
}

func shardColumns(wide bool) []string {
	h := append([]string(nil), shardHeader...)
	if wide {
		h = append(h, "STATUS", "OVERRIDE", "LEASE-EXPIRES", "METRICS")
	}
	return h
}

func (l shardList) Rows(wide bool, c output.Colors) [][]string {
	rows := make([][]string, 0, len(l.Shards)+len(l.Unregistered))
	proxiesCell := func(id string) (string, bool) {
		h := proxies.Of(l.Proxies, id)
		cell := h.String()
		if h.Down > 0 {
			cell = c.State(registryapi.StateDown) + cell[len("DOWN"):]
		}
		return cell, h.Down > 0
	}
	for _, s := range l.Shards {
		cell, down := proxiesCell(s.ID)
		if down {
			// DOWN wherever shardctl shows it: the registry's state is
			// in -o wide's STATUS and OVERRIDE, and in the JSON.
			s.State = registryapi.StateDown
		}
		row := shardRow(s, wide, c)
		if wide {
			row = append(row, cell)
		}
		rows = append(rows, row)
	}
	for _, s := range l.Unregistered {
		cell, _ := proxiesCell(s.ID)
		row := []string{s.ID, strconv.Itoa(s.Slot), output.Dash(s.Pool), c.State(string(s.State)), s.Address, "not registered"}
		if wide {
			row = append(row, "-", "-", "-", "-", cell)
		}
		rows = append(rows, row)
	}
	return rows
}

func shardRow(s registryapi.Shard, wide bool, c output.Colors) []string {
	renewed := "static"
	if !s.Static {
		renewed = duration.HumanDuration(time.Since(s.LastRenewal)) + " ago"
	}
	row := []string{s.ID, strconv.Itoa(s.Slot), output.Dash(s.Pool), c.State(s.State), s.Address, renewed}
	if wide {
		expires := "never"
		if s.LeaseExpires != nil {
			expires = s.LeaseExpires.Format(time.RFC3339)
		}
		row = append(row, string(s.Status), output.Dash(string(s.OverriddenStatus)), expires, output.Dash(s.Metadata[registryapi.MetaMetrics]))
	}
	return row
}

// shardView prints one shard.
type shardView struct{ registryapi.Shard }

func (shardView) Header(wide bool) []string { return shardColumns(wide) }
func (v shardView) Rows(wide bool, c output.Colors) [][]string {
	return [][]string{shardRow(v.Shard, wide, c)}
}

// replicaLine says which replica answered and who coordinates, for -o wide.
func replicaLine(rs *registryapi.ReplicaStatus, c output.Colors) string {
	coord := rs.Coordinator
	if coord == "" {
		coord = c.Warn("none elected")
	}
	line := fmt.Sprintf("replica %s of %s over etcd, coordinator %s", rs.ID, strings.Join(rs.Members, ","), coord)
	if len(rs.Coordinators) > 0 {
		line += " (preferred " + strings.Join(rs.Coordinators, ",") + ")"
	}
	if rs.CutOff {
		line += ", " + c.Warn("CUT OFF from etcd, view "+rs.Staleness+" old")
	}
	return line
}

// ShardsListOptions lists shards.
type ShardsListOptions struct {
	f       *cmdutil.RegistryFlags
	pool    string
	state   string
	printer *output.Printer
	c       *registryclient.Client
	admin   proxies.Admin
}

func newCmdShardsList(f *cmdutil.RegistryFlags) *cobra.Command {
	o := &ShardsListOptions{f: f}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the shards, and the registry's self-preservation state",
		Example: `  shardctl shards list
  shardctl shards list --pool blue -o wide
  shardctl shards list -o json | jq -r '.shards[] | select(.state=="UP") | .id'`,
		Aliases:           []string{"ls"},
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              cmdutil.RunOptions(o),
	}
	cmd.Flags().StringVar(&o.pool, "pool", "", "only the shards of this pool")
	cmd.Flags().StringVar(&o.state, "state", "", "only shards in this state (UP, DRAINING, OUT_OF_SERVICE, DOWN, STARTING)")
	_ = cmd.RegisterFlagCompletionFunc("pool", completions.Pools(f.Catalog))
	_ = cmd.RegisterFlagCompletionFunc("state", completions.Values(registryapi.StateUp, registryapi.StateDraining, registryapi.StateOutOfService, registryapi.StateDown, registryapi.StateStarting))
	return cmd
}

func (o *ShardsListOptions) Complete(*cobra.Command, []string) (err error) {
	if o.printer, err = o.f.Globals.Printer(); err != nil {
		return err
	}
	if o.admin, err = o.f.Globals.ProxyAdmin(); err != nil {
		return err
	}
	o.c, err = o.f.Client()
	return err
}

func (o *ShardsListOptions) Validate() error { return nil }

func (o *ShardsListOptions) Run(ctx context.Context) error {
	health, err := o.c.Status(ctx)
	if err != nil {
		return err
	}
	shards, err := o.c.Shards(ctx, o.f.App)
	if err != nil {
		return err
	}
	l := shardList{Registry: health, Shards: []registryapi.Shard{}}
	// What the proxies see: a shard the registry calls UP may not
	// answer, and one it dropped may still hold keys. A proxy that does
	// not answer is said, not fatal.
	views, err := o.admin.Read(ctx, o.c)
	l.Proxies = views
	// --state filters by the state shown: DOWN when a proxy holds it so.
	wanted := func(pool, state, id string) bool {
		if proxies.Of(views, id).Down > 0 {
			state = registryapi.StateDown
		}
		return (o.pool == "" || pool == o.pool) && (o.state == "" || strings.EqualFold(state, o.state))
	}
	for _, s := range shards {
		if wanted(s.Pool, s.State, s.ID) {
			l.Shards = append(l.Shards, s)
		}
	}
	if err != nil {
		fmt.Fprintf(o.f.Globals.Streams.ErrOut, "warning: %v\n", err)
	}
	for _, v := range l.Proxies {
		if v.Error != "" && !o.printer.Format.Machine() {
			fmt.Fprintf(o.f.Globals.Streams.ErrOut, "warning: proxy %s (%s): %s\n", v.Proxy, v.Admin, v.Error)
		}
	}
	for _, s := range proxies.Unlisted(l.Proxies, shards) {
		if wanted(s.Pool, string(s.State), s.ID) {
			l.Unregistered = append(l.Unregistered, s)
		}
	}
	if !o.printer.Format.Machine() {
		preserving := "off"
		switch {
		case health.SelfPreserving:
			preserving = o.printer.Colors.Warn("ON (eviction held)")
		case !health.SelfPreservationEnabled:
			preserving = "disabled"
		}
		fmt.Fprintf(o.f.Globals.Streams.ErrOut, "registry %s: %d instances, self-preservation %s (renewals %.0f/min, threshold %.0f/min)\n",
			o.f.Globals.RegistryURL(), health.Instances, preserving, health.RenewalsLastMinute, health.RenewalThreshold)
		if rs := health.Replica; rs != nil && o.printer.Format == output.Wide {
			fmt.Fprintf(o.f.Globals.Streams.ErrOut, "%s\n", replicaLine(rs, o.printer.Colors))
		}
		if len(l.Shards) == 0 && len(l.Unregistered) == 0 {
			fmt.Fprintf(o.f.Globals.Streams.ErrOut, "no shards in %s\n", o.f.App)
			return nil
		}
	}
	return o.printer.Print(l)
}

// ShardsGetOptions prints one shard.
type ShardsGetOptions struct {
	f       *cmdutil.RegistryFlags
	id      string
	printer *output.Printer
	c       *registryclient.Client
}

func newCmdShardsGet(f *cmdutil.RegistryFlags) *cobra.Command {
	o := &ShardsGetOptions{f: f}
	return &cobra.Command{
		Use:               "get ID",
		Short:             "Print one shard",
		Example:           `  shardctl shards get blue-1 -o yaml`,
		Args:              cmdutil.ExactArgs(1, "a shard id"),
		ValidArgsFunction: completions.ShardIDs(f.Catalog),
		RunE:              cmdutil.RunOptions(o),
	}
}

func (o *ShardsGetOptions) Complete(_ *cobra.Command, args []string) (err error) {
	o.id = args[0]
	if o.printer, err = o.f.Globals.Printer(); err != nil {
		return err
	}
	o.c, err = o.f.Client()
	return err
}

func (o *ShardsGetOptions) Validate() error { return nil }

func (o *ShardsGetOptions) Run(ctx context.Context) error {
	s, err := o.c.Shard(ctx, o.f.App, o.id)
	if err != nil {
		return err
	}
	return o.printer.Print(shardView{s})
}

// ShardsRegisterOptions registers a shard that no sidecar heartbeats.
type ShardsRegisterOptions struct {
	f       *cmdutil.RegistryFlags
	reg     registryapi.ShardRegistration
	printer *output.Printer
	c       *registryclient.Client
}

func newCmdShardsRegister(f *cmdutil.RegistryFlags) *cobra.Command {
	o := &ShardsRegisterOptions{f: f}
	cmd := &cobra.Command{
		Use:   "register ID --address HOST:PORT",
		Short: "Register a shard by hand (static: it never expires)",
		Long: `Register a Zeebe cluster as a shard, for clusters without a sidecar that
heartbeats. The registration is static: it never expires, and the registry
does not expect renewals from it. Without --slot the registry assigns the
lowest free slot; a shard keeps its slot until it is deregistered with
--release-slot.`,
		Example:           `  shardctl shards register green-1 --address 10.0.3.7:26500 --pool green --metrics http://10.0.3.7:9600/metrics --rest http://10.0.3.7:8080`,
		Args:              cmdutil.ExactArgs(1, "a shard id"),
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              cmdutil.RunOptions(o),
	}
	cmd.Flags().StringVar(&o.reg.Address, "address", "", "the shard's Zeebe gateway, HOST:PORT (required)")
	cmd.Flags().StringVar(&o.reg.Pool, "pool", "", "pool of the shard (e.g. blue or green)")
	cmd.Flags().IntVar(&o.reg.Slot, "slot", 0, "key slot 1-31 (0: the registry assigns one)")
	cmd.Flags().StringVar(&o.reg.Metrics, "metrics", "", "URL of the shard's /metrics")
	cmd.Flags().StringVar(&o.reg.REST, "rest", "", "base URL of the shard's REST API (/v2 below it), where proxies send the searches they federate and drain lists what a stuck shard still runs")
	cmd.Flags().StringSliceVar(&o.reg.PhysicalTenants, "physical-tenants", nil, "the 8.10 physical tenants the shard serves, comma-separated (default: default only); proxies place their work there")
	cmd.Flags().StringVar(&o.reg.TLS, "tls", "", "how proxies connect to the shard: true (TLS checked against their --upstream-ca) or insecure (TLS unchecked); plain text when not set")
	cmd.Flags().StringVar(&o.reg.Credential, "credential", "", "the name of the proxies' credential their own calls to the shard carry (one their configuration defines; default: their \"default\")")
	_ = cmd.RegisterFlagCompletionFunc("pool", completions.Pools(f.Catalog))
	return cmd
}

func (o *ShardsRegisterOptions) Complete(_ *cobra.Command, args []string) (err error) {
	o.reg.ID, o.reg.App, o.reg.Static = args[0], o.f.App, true
	if o.printer, err = o.f.Globals.Printer(); err != nil {
		return err
	}
	o.c, err = o.f.Client()
	return err
}

func (o *ShardsRegisterOptions) Validate() error {
	if o.reg.Address == "" {
		return fmt.Errorf("--address HOST:PORT is required")
	}
	_, err := registryapi.NewShardInstance(o.reg)
	return err
}

func (o *ShardsRegisterOptions) Run(ctx context.Context) error {
	in, _ := registryapi.NewShardInstance(o.reg)
	if err := o.c.Register(ctx, in); err != nil {
		return err
	}
	s, err := o.c.Shard(ctx, o.f.App, o.reg.ID)
	if err != nil {
		return err
	}
	return o.printer.Print(shardView{s})
}

// ShardsDeregisterOptions removes a shard.
type ShardsDeregisterOptions struct {
	f           *cmdutil.RegistryFlags
	id          string
	releaseSlot bool
	c           *registryclient.Client
}

func newCmdShardsDeregister(f *cmdutil.RegistryFlags) *cobra.Command {
	o := &ShardsDeregisterOptions{f: f}
	cmd := &cobra.Command{
		Use:   "deregister ID",
		Short: "Remove a shard from the registry",
		Long: `Remove a shard from the registry. Its slot stays reserved for it (keys
clients hold still name it) unless --release-slot is given. A shard whose
sidecar still heartbeats registers itself again: stop the sidecar first, or
drain the shard instead.`,
		Example:           `  shardctl shards deregister green-1 --release-slot`,
		Args:              cmdutil.ExactArgs(1, "a shard id"),
		ValidArgsFunction: completions.ShardIDs(f.Catalog),
		RunE:              cmdutil.RunOptions(o),
	}
	cmd.Flags().BoolVar(&o.releaseSlot, "release-slot", false, "also free the shard's slot for another shard")
	return cmd
}

func (o *ShardsDeregisterOptions) Complete(_ *cobra.Command, args []string) (err error) {
	o.id = args[0]
	o.c, err = o.f.Client()
	return err
}

func (o *ShardsDeregisterOptions) Validate() error { return nil }

func (o *ShardsDeregisterOptions) Run(ctx context.Context) error {
	if err := o.c.Deregister(ctx, o.f.App, o.id, o.releaseSlot); err != nil {
		return err
	}
	fmt.Fprintf(o.f.Globals.Streams.Out, "shard %s deregistered\n", o.id)
	return nil
}

// ShardsStateOptions sets a shard's state: drain and undrain.
type ShardsStateOptions struct {
	f       *cmdutil.RegistryFlags
	id      string
	state   string
	printer *output.Printer
	c       *registryclient.Client
}

func newCmdShardsState(f *cmdutil.RegistryFlags, verb, state, short string) *cobra.Command {
	o := &ShardsStateOptions{f: f, state: state}
	return &cobra.Command{
		Use:               verb + " ID",
		Short:             short,
		Example:           fmt.Sprintf("  shardctl shards %s blue-1", verb),
		Args:              cmdutil.ExactArgs(1, "a shard id"),
		ValidArgsFunction: completions.ShardIDs(f.Catalog),
		RunE:              cmdutil.RunOptions(o),
	}
}

func (o *ShardsStateOptions) Complete(_ *cobra.Command, args []string) (err error) {
	o.id = args[0]
	if o.printer, err = o.f.Globals.Printer(); err != nil {
		return err
	}
	o.c, err = o.f.Client()
	return err
}

func (o *ShardsStateOptions) Validate() error { return nil }

func (o *ShardsStateOptions) Run(ctx context.Context) error {
	s, err := o.c.SetState(ctx, o.f.App, o.id, o.state)
	if err != nil {
		return err
	}
	return o.printer.Print(shardView{s})
}
