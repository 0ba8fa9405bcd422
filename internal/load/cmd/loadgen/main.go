// Command loadgen offers a Zeebe gateway (a shard, the proxy) a fixed
// rate of process instances and completes their jobs, for benchmarks and
// rehearsals: loadgen --addr HOST:PORT --rate 50.
// It imports internal/load and nothing else of this module.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/camunda/zeebe/clients/go/v8/pkg/zbc"

	"github.com/shardctl/shardctl/internal/load"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:26500", "gateway address, HOST:PORT")
	rate := flag.Float64("rate", 10, "process instances offered per second")
	flag.Parse()
	c, err := zbc.NewClient(&zbc.ClientConfig{GatewayAddress: *addr, UsePlaintextConnection: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	defer c.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	g := load.New(load.GRPC(c), load.Config{ProcessID: "loadgen", JobType: "loadgen-work", Rate: *rate})
	if err := g.Deploy(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen: deploy:", err)
		os.Exit(1)
	}
	g.Run(ctx)
	fmt.Fprintf(os.Stderr, "loadgen: %+v\n", g.Stats())
}
