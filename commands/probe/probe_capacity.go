package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"
	"github.com/spf13/cobra"

	"github.com/shardctl/shardctl/commands/cmdutil"
	"github.com/shardctl/shardctl/commands/output"
	"github.com/shardctl/shardctl/internal/human"
	"github.com/shardctl/shardctl/internal/load"
	"github.com/shardctl/shardctl/probes/capacity"
	"github.com/shardctl/shardctl/tui"
)

// The protocols a capacity probe speaks.
const (
	protocolGRPC = "grpc"
	protocolREST = "rest"
)

// ProbeCapacityOptions finds a cluster's knee.
type ProbeCapacityOptions struct {
	g        *cmdutil.Globals
	target   string
	protocol string
	process  string
	tls      bool
	step     string
	stopDone string
	stopErrs string
	cfg      capacity.Config
	printer  *output.Printer
}

func newCmdProbeCapacity(g *cmdutil.Globals) *cobra.Command {
	o := &ProbeCapacityOptions{g: g}
	cmd := &cobra.Command{
		Use:   "capacity --target HOST:PORT",
		Short: "Find a cluster's knee by what completes: a rising open-loop rate, stage by stage",
		Long: `Find the knee of a Zeebe cluster (a shard, or the proxy in front of many)
the published way, counting what completed, not what was accepted:

  1. deploy the process (--process FILE.bpmn, else a built-in process of
     three service tasks in a line);
  2. warm up for --warmup at --start instances a second;
  3. raise the rate by --step every --stage, starting instances on a clock
     whatever the answers take (open loop), while job workers (the Zeebe Go
     client, --workers each) complete every job;
  4. stop at the end of the first stage where completed < --stop-completed
     of started, or errors > --stop-errors of offered (RESOURCE_EXHAUSTED
     included), or the start call's p99 > --stop-p99.

Each stage reports offered, started and completed per second, the share of
its starts completed within it (COMPLETED) and by the end of the run
(EVENTUALLY: after the last stage the workers go on for up to --stage, at
least 30s and at most a minute, until none is left or none completes for
3s), errors and the start call's p50/p99. --protocol rest drives the same
load over Camunda 8.8's REST API (/v2 at --target): instances started with
POST /v2/process-instances, jobs activated by long poll and completed as
Camunda's REST job workers do, a 503 RESOURCE_EXHAUSTED counted as a
refusal. The knee is the last stage that
completed at least 95% of what it started and refused at most 1% of its
offers. On a terminal a progress line runs and the scissors of started vs
completed per stage are redrawn after every stage. Ctrl-C stops the load and
prints what was measured. An instance counts as completed when a job of a
task flowing straight to an end event is completed.

Published defaults take long (15 min warm-up, 5 min stages) because a
backlog takes minutes to show; shorter stages find a knee that is too high.
The connection is plaintext unless --tls; the Zeebe client's environment
(ZEEBE_CA_CERTIFICATE_PATH, ZEEBE_CLIENT_ID, ZEEBE_CLIENT_SECRET,
ZEEBE_AUTHORIZATION_SERVER_URL) applies as for zbctl.`,
		Example: `  # the published method against one cluster (about an hour and more)
  shardctl probe capacity --target 10.0.0.5:26500

  # the same through the proxy in front of four clusters
  shardctl probe capacity --target proxy:26500

  # the same over the REST API, as Camunda 8.8's clients speak it
  shardctl probe capacity --protocol rest --target proxy:8080

  # a quick look at a simulator, as JSON
  shardctl probe capacity --target 127.0.0.1:26500 --warmup 10s --stage 15s --start 20 -o json`,
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE:              cmdutil.RunOptions(o),
	}
	f := cmd.Flags()
	f.StringVar(&o.target, "target", "", "the Zeebe gateway to load, HOST:PORT (a shard or the proxy)")
	f.StringVar(&o.process, "process", "", "a BPMN file to run instead of the built-in three-task process")
	f.StringVar(&o.protocol, "protocol", protocolGRPC, "what the load speaks: "+protocolGRPC+" (the Zeebe gateway API) or "+protocolREST+" (Camunda 8.8's REST API, /v2)")
	f.BoolVar(&o.tls, "tls", false, "connect with TLS (plaintext without)")
	f.DurationVar(&o.cfg.Warmup, "warmup", capacity.DefaultWarmup, "warm-up at --start before the first stage (0: none)")
	f.Float64Var(&o.cfg.Start, "start", capacity.DefaultStart, "instances a second of the warm-up and the first stage")
	f.StringVar(&o.step, "step", "10%", "how much each stage raises the rate")
	f.DurationVar(&o.cfg.Stage, "stage", capacity.DefaultStage, "length of a stage")
	f.IntVar(&o.cfg.Workers, "workers", capacity.DefaultWorkers, "concurrency of each job worker")
	f.BoolVar(&o.cfg.Stream, "stream", false, "job workers take jobs pushed on a stream (Zeebe 8.4+) instead of polling")
	f.StringVar(&o.stopDone, "stop-completed", "15%", "stop when a stage completes less than this share of what it started")
	f.StringVar(&o.stopErrs, "stop-errors", "1%", "stop when more than this share of a stage's offers fail")
	f.DurationVar(&o.cfg.StopP99, "stop-p99", capacity.DefaultStopP99, "stop when a stage's start call p99 is over this")
	_ = cmd.MarkFlagRequired("target")
	return cmd
}

func (o *ProbeCapacityOptions) Complete(*cobra.Command, []string) (err error) {
	o.printer, err = o.g.Printer()
	if err != nil {
		return err
	}
	for _, p := range []struct {
		flag string
		text string
		dst  *float64
	}{{"--step", o.step, &o.cfg.Step}, {"--stop-completed", o.stopDone, &o.cfg.StopCompleted}, {"--stop-errors", o.stopErrs, &o.cfg.StopErrors}} {
		if *p.dst, err = parsePercent(p.text); err != nil {
			return cmdutil.Usagef("%s %q: %v", p.flag, p.text, err)
		}
	}
	if o.process != "" {
		if o.cfg.Process, err = os.ReadFile(o.process); err != nil {
			return fmt.Errorf("--process: %w", err)
		}
		o.cfg.ProcessName = filepath.Base(o.process)
	}
	return nil
}

// parsePercent reads "10%" or "0.1" as 0.1.
func parsePercent(s string) (float64, error) {
	t := strings.TrimSpace(s)
	pct := strings.HasSuffix(t, "%")
	v, err := strconv.ParseFloat(strings.TrimSuffix(t, "%"), 64)
	if err != nil {
		return 0, errors.New("want a share such as 10% or 0.1")
	}
	if pct {
		v /= 100
	}
	if v <= 0 || v >= 1 {
		return 0, errors.New("want a share above 0% and under 100%")
	}
	return v, nil
}

func (o *ProbeCapacityOptions) Validate() error {
	if _, _, err := net.SplitHostPort(o.target); err != nil {
		return fmt.Errorf("--target %q: want HOST:PORT: %v", o.target, err)
	}
	if o.protocol != protocolGRPC && o.protocol != protocolREST {
		return fmt.Errorf("--protocol %q: want %s or %s", o.protocol, protocolGRPC, protocolREST)
	}
	if o.protocol == protocolREST && o.cfg.Stream {
		return fmt.Errorf("--stream: the REST API has no job stream; its workers poll")
	}
	if o.cfg.Start <= 0 || o.cfg.Stage <= 0 || o.cfg.Warmup < 0 || o.cfg.Workers <= 0 || o.cfg.StopP99 <= 0 {
		return errors.New("--start, --stage, --workers and --stop-p99: want them above 0; --warmup: 0 or more")
	}
	return nil
}

func (o *ProbeCapacityOptions) Run(ctx context.Context) error {
	if o.protocol == protocolREST {
		scheme := "http"
		if o.tls {
			scheme = "https"
		}
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
		defer hc.CloseIdleConnections()
		o.cfg.Client = load.REST(scheme+"://"+o.target, hc)
	} else {
		c, err := zbc.NewClient(&zbc.ClientConfig{GatewayAddress: o.target, UsePlaintextConnection: !o.tls})
		if err != nil {
			return fmt.Errorf("--target %s: %w", o.target, err)
		}
		defer c.Close()
		// The client's job workers log every failed poll to the standard
		// logger, which past a knee is many a second: the stages say it.
		log.SetOutput(io.Discard)
		o.cfg.Client = load.GRPC(c)
	}
	cmdutil.CollectLessOften()
	if cmdutil.IsTerminal(o.g.Streams.ErrOut) {
		live := &capacityLive{w: o.g.Streams.ErrOut, stage: o.cfg.Stage, warmup: o.cfg.Warmup}
		o.cfg.Progress, o.cfg.Done = live.progress, live.done
	}
	rep, err := capacity.Run(ctx, o.target, o.cfg)
	if len(rep.Stages) > 0 {
		if perr := o.printer.Print(capacityView{rep}); perr != nil {
			return perr
		}
		if !o.printer.Format.Machine() {
			fmt.Fprintln(o.g.Streams.Out, capacitySummary(rep))
		}
	}
	if errors.Is(err, context.Canceled) {
		// Ctrl-C: what was measured is printed; the run ends as asked.
		return nil
	}
	return err
}

// capacitySummary is the knee and why the run stopped, in a sentence.
func capacitySummary(rep capacity.Report) string {
	knee := "no stage completed 95% of what it started"
	if rep.KneeStage > 0 {
		knee = fmt.Sprintf("knee %s/s (stage %d)", human.Rate(rep.Knee), rep.KneeStage)
	}
	return fmt.Sprintf("%s; stopped: %s", knee, rep.StopReason)
}

// capacityLive is the terminal view of a run: a progress line, and the
// scissors per stage redrawn as each stage ends.
type capacityLive struct {
	w                  io.Writer
	stage, warmup      time.Duration
	started, completed []float64
	drawn              int // lines of the chart on screen
}

func (l *capacityLive) progress(st capacity.Stage) {
	length := l.stage
	name := fmt.Sprintf("stage %d", st.Stage)
	if st.Warmup {
		length, name = l.warmup, "warm-up"
	}
	fmt.Fprintf(l.w, "\r\x1b[K%s %s at %s/s: %s of %s · started %s/s completed %s/s errors %s p99 %s",
		output.Bar(st.Seconds/length.Seconds(), 20), name, human.Rate(st.Offered), human.Seconds(st.Seconds), human.Duration(length),
		human.Rate(st.StartedPerSec), human.Rate(st.CompletedPerSec), human.Percent(st.ErrorShare), human.Latency(st.P99))
}

func (l *capacityLive) done(st capacity.Stage) {
	fmt.Fprint(l.w, "\r\x1b[K")
	if st.Warmup {
		return
	}
	l.started, l.completed = append(l.started, st.StartedPerSec), append(l.completed, st.CompletedPerSec)
	if l.drawn > 0 {
		fmt.Fprintf(l.w, "\x1b[%dA\x1b[J", l.drawn)
	}
	per := max(1, min(6, 72/len(l.started)))
	chart := tui.StagesChart(l.started, l.completed, per, 10)
	fmt.Fprint(l.w, chart)
	l.drawn = strings.Count(chart, "\n")
}

// capacityView is a run as a table, a row a stage; its JSON is the
// report's.
type capacityView struct{ capacity.Report }

func (v capacityView) Header(wide bool) []string {
	h := []string{"STAGE", "OFFERED/S", "STARTED/S", "COMPLETED/S", "COMPLETED", "EVENTUALLY", "ERRORS", "P50", "P99"}
	if wide {
		h = append(h, "REFUSED", "FAILED", "NOT SENT", "SECONDS")
	}
	return h
}

func (v capacityView) Rows(wide bool, c output.Colors) [][]string {
	var rows [][]string
	for _, st := range v.Stages {
		name := strconv.Itoa(st.Stage)
		if st.Warmup {
			name = "warm-up"
		}
		if st.Stage == v.KneeStage && v.KneeStage > 0 {
			name = c.Good(name + " knee")
		}
		share := human.Percent(st.CompletedShare())
		if st.CompletedShare() < capacity.KneeShare {
			share = c.Bad(share)
		}
		eventually := human.Percent(st.EventualShare())
		if st.EventualShare() < capacity.KneeShare {
			eventually = c.Bad(eventually)
		}
		row := []string{name, human.Rate(st.Offered), human.Rate(st.StartedPerSec), human.Rate(st.CompletedPerSec), share, eventually,
			human.Percent(st.ErrorShare), human.Latency(st.P50), human.Latency(st.P99)}
		if wide {
			row = append(row, strconv.FormatInt(st.Refused, 10), strconv.FormatInt(st.Failed, 10), strconv.FormatInt(st.Skipped, 10),
				strconv.FormatFloat(st.Seconds, 'f', 1, 64))
		}
		rows = append(rows, row)
	}
	return rows
}
