# shardctl — see README.md. `make test` before a push; CI runs `make test test-long`.
PKG      := github.com/shardctl/shardctl/internal/version
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
DATE     ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS  := -X $(PKG).version=$(VERSION) -X $(PKG).commit=$(COMMIT) -X $(PKG).date=$(DATE)

.PHONY: build test test-long bench bench-tui bench-sim bench-proxy bench-rest bench-search bench-jobs bench-drift bench-capacity bench-overload bench-registry bench-registry-floor bench-registry-probe bench-registry-failover bench-resilience fuzz lint snapshot completions clean

build: ## bin/shardctl with version stamped
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/shardctl ./cmd/shardctl

test: ## the fast tier: installs what is missing, lint, every behaviour test with -race (not the long scenarios)
	scripts/test.sh

test-long: ## the long tier: the multi-minute load scenarios (*_long_test.go, build tag long), with -race
	scripts/test.sh long

bench: ## every benchmark; figures and peer ratios print as they run
	go test -run '^$$' -bench . -benchmem ./...

bench-sim: ## simulator: CreateProcessInstance/s and CompleteJob/s, real Zeebe client, 64 in flight
	go test -run '^$$' -bench . -benchtime 50000x -count 5 ./internal/sim/ | scripts/bench-median.sh

bench-proxy: ## proxy (frame front, and its grpc front) vs nginx vs HAProxy vs direct: CreateProcessInstance at 64 in flight, 3 simulated shards, CPU per call
	scripts/install-debs.sh nginx haproxy
	go test -run '^$$' -bench BenchmarkPeers -benchtime 1x -timeout 30m ./internal/proxy/

bench-rest: ## the REST API (/v2): shardctl's REST front vs nginx vs HAProxy (HTTP/1.1 to the simulators' REST API) vs direct: POST /v2/process-instances at 64 in flight, 3 simulated shards, CPU per call, added p99 at half load
	go test -run '^$$' -bench BenchmarkRESTPeers -benchtime 1x -timeout 30m ./internal/proxy/

bench-search: ## federated search: a REST search through shardctl over 3 simulated shards vs the same search sent to the 3 at once (the slowest answer), p50/p99 at 1 and 8 in flight
	go test -run '^$$' -bench BenchmarkSearchFanOut -benchtime 1x -timeout 30m ./internal/proxy/

bench-drift: ## why bench-proxy's process ends as it starts: direct open loop at half load, repeated, for a process whose task nobody works and for one that ends as it starts; the simulators' memory and direct's p99 spread, with ratios
	go test -run '^$$' -bench BenchmarkStateDrift -benchtime 1x -timeout 30m ./internal/proxy/

bench-jobs: ## the job path: proxy CPU per completed job beside HAProxy's, real Zeebe client workers on one simulator (5 rounds), and the proxy's profile
	scripts/install-debs.sh haproxy
	go test -run '^$$' -bench BenchmarkJobPath -benchtime 1x -timeout 30m ./internal/proxy/

bench-capacity: ## the headline: probe capacity against one simulated monolith and against the proxy over four, same process and stages (CAPACITY_STAGE, default 10s), knees and their ratio
	go test -run '^$$' -bench FederationHeadline -benchtime 1x -timeout 60m ./probes/capacity/

bench-overload: ## overload past the knee: the proxy over four --degrade simulators offered 1, 1.5, 2 and 3 times the federation's knee (probe capacity, same run), the three-task streamed process and a one-task one, admission on and --instance-limit -1 beside it; a process with a 10-minute timer stepped from 10% to 60% of the knee, then 2x
	go test -run '^$$' -bench Overload -benchtime 1x -timeout 120m ./probes/capacity/

bench-registry-floor: ## the memory-store registry against a net/http endpoint that keeps nothing (the floor of the HTTP stack here), separate processes, 3 rounds, medians and ratios: registrations at 50 concurrent, then the open-loop mix 70/20/10 at 5000/s over 3500 instances (p99s, their ratio, offers dropped)
	go test -run '^$$' -bench 'RegisterFloor|MixFloor' -benchtime 1x -timeout 20m ./probes/registryprobe/

bench-registry-probe: build ## shardctl probe registry against a memory-store registry, then three replicas over embedded etcd, with the ratio (all share this machine's cores); then etcd alone, three embedded members taking groups of 50 puts: the ceiling of any replicated write here
	scripts/bench-registry-probe.sh bin/shardctl
	go test -run '^$$' -bench EtcdPuts -benchtime 1000x -count 3 ./internal/registry/store/ | scripts/bench-median.sh

bench-registry-failover: ## registry failover, three replicas with embedded etcd: SIGKILL of the coordinator (and etcd leader) under registrations at half the measured rate (election time, registrations lost, fargo and eureka-js-client errors and recovery, the killed one back), a SIGSTOPped coordinator fenced, all three restarted (SIGTERM, SIGKILL)
	go test -tags long -count=1 -timeout 15m -v -run 'TestKillCoordinatorUnderRegistrations|TestPausedCoordinatorIsFenced|TestRestartAllReplicas' ./internal/registry/ | grep -E '^(---|ok|FAIL)|failover_long_test\.go:[0-9]+: '

bench-resilience: ## proxy under failure: time to DOWN and throughput around a SIGKILL, a stalled and a slowed shard's share, SIGTERM, 1.5x the knee, saturation (RESOURCE_EXHAUSTED latency against a shard's own, heap)
	go test -tags long -count=1 -timeout 20m -v -run 'TestKillOneShardUnderLoad|TestStalledShardUnderLoad|TestProxySIGTERMUnderLoad|TestOverloadPastTheKnee' ./cmd/shardctl/ | grep -E '^(---|ok|FAIL)|_test.go:[0-9]+: (DOWN|slow|pause|stopped|created|job completions|stage|offered|after the fill|shard-[0-9]:)'
	go test -count=1 -timeout 10m -v -run 'TestSaturatedShardsRefuseAtOnce|TestStalledJobStreamIsEnded' ./internal/proxy/ | grep -E '^(---|ok|FAIL)|_test.go:[0-9]+: [0-9]|stall'

bench-registry: ## registry: full fetch of 600 instances (JSON, gzip, XML), from the snapshot and right after a change; one registration through the handler
	go test -run '^$$' -bench BenchmarkFullFetch600 -benchtime 500x -count 5 ./internal/registry/ | scripts/bench-median.sh
	go test -run '^$$' -bench BenchmarkRegisterHandler -benchtime 50000x -count 5 ./internal/registry/ | scripts/bench-median.sh

FUZZTIME ?= 60s
fuzz: ## run every fuzz target for FUZZTIME each (new crashers land in testdata/fuzz as regressions)
	for pkg in $$(grep -rl --include='*_test.go' '^func Fuzz' internal probes migrate commands | xargs -n1 dirname | sort -u); do \
		for f in $$(go test -list '^Fuzz' ./$$pkg | grep '^Fuzz'); do \
			go test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 200x ./$$pkg || exit 1; \
		done; \
	done

bench-tui: ## shardctl top: one frame at 200x50 (target <= 10 ms), and its CPU on 16 shards at 2 s refresh (target <= 3% of a core)
	go test -run '^$$' -bench BenchmarkRender -benchtime 200x -count 5 ./tui/ | scripts/bench-median.sh
	scripts/bench-top.sh 60

lint: ## gofmt, go vet, staticcheck
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "run gofmt -w on the files above"; exit 1; }
	go vet -tags long ./...
	$$(scripts/tools.sh staticcheck) -tags long ./...

snapshot: ## release build of every platform into dist/, without publishing
	$$(scripts/tools.sh goreleaser) release --snapshot --clean --config goreleaser.yaml

completions: ## shell completion scripts into build/completions
	scripts/completions.sh

clean:
	rm -rf bin build dist
