package proxy

import (
	"flag"
	"go/ast"
	gobuild "go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shardctl/shardctl/internal/proctest"
)

// TestMain removes the shardctl binary the integration tests built, and
// fails the package if a goroutine outlives its tests. With
// SHARDCTL_TEST_FRONT set and no -run, only frontTests run: the rest do
// not depend on the front, and the default one ran them already.
func TestMain(m *testing.M) {
	flag.Parse()
	if os.Getenv(envFront) != "" && !flagSet("test.run") {
		if err := flag.Set("test.run", "^("+strings.Join(frontTests, "|")+")$"); err != nil {
			panic(err)
		}
	}
	os.Exit(proctest.Main(m))
}

// frontTests check what a front does: the calls clients make through it
// (keys rewritten on the wire, fan-out answers, refusals and their
// statuses), job polls and streams at the client's side, closing them,
// TLS from clients and what is forwarded upstream, which also differs by
// front (frame connections or grpc-go's). scripts/test.sh runs them again
// with --front=grpc. Not here: placement, health, the shard set,
// admission, the registry, logging, units that start no proxy, and the
// tests of the frame front alone (they pin it, or skip on grpc).
var frontTests = []string{
	// Calls through the front, keys rewritten both ways.
	"TestTwoThousandInstancesThroughTheProxy",
	"TestKeyAddressedCallsThroughTheProxy",
	"TestLegacyShardServesUnslottedKeys",
	"TestDefinitionKeysSurviveAProxyRestart",
	"TestRemainingRPCsThroughTheProxy",
	"TestMessagesThroughTheProxy",
	"TestZbctlThroughTheProxy",
	"TestFanOutReportsAShardThatFailed",
	// Long polls at the client's side, and their end.
	"TestNoJobIsStranded",
	"TestLoneShardLongPoll",
	"TestRelayedPollSurplus",
	"TestRelayedPollLargeBatch",
	"TestRelayedPollWorkerGone",
	"TestCloseEndsLongPolls",
	"TestCloseWaitsForHandBacks",
	// Job streams.
	"TestJobStreamingThroughTheProxy",
	"TestJobStreamEndGivesBufferedJobsBack",
	"TestStalledJobStreamIsEnded",
	// Refusals as clients get them.
	"TestInflightLimitRefusesAtOnce",
	"TestSaturatedShardsRefuseAtOnce",
	// Connections, TLS and credentials, both sides.
	"TestConnectionsPerShard",
	"TestTLSClientsAndShards",
	"TestTLSUpstreamRefusals",
	"TestCertificateRotatedUnderLoad",
	"TestForwardsAuthorization",
	"TestSecuredShards",
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// Every name in frontTests is a test of the package's fast tier, so a
// renamed or moved test cannot drop out of the grpc rerun unnoticed.
func TestFrontTestsAreTests(t *testing.T) {
	pkg, err := gobuild.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	var tests []string
	fset := token.NewFileSet()
	for _, name := range pkg.TestGoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(pkg.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") && fn.Name.Name != "TestMain" {
				tests = append(tests, fn.Name.Name)
			}
		}
	}
	for i, name := range frontTests {
		if !slices.Contains(tests, name) {
			t.Errorf("frontTests names %s, which is not a test of the package's fast tier", name)
		}
		if slices.Contains(frontTests[:i], name) {
			t.Errorf("frontTests names %s twice", name)
		}
	}
}
