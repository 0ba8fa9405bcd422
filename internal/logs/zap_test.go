package logs_test

import (
	"log/slog"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/shardctl/shardctl/internal/logs"
	"github.com/shardctl/shardctl/internal/logs/logstest"
)

// A library's zap lines reach the runtime's slog log from min up, with
// their fields and those given to With.
func TestZapReachesSlog(t *testing.T) {
	for _, tc := range []struct {
		name  string
		log   func(*zap.Logger)
		want  bool
		level string
	}{
		{"info below warn", func(z *zap.Logger) { z.Info("member started") }, false, ""},
		{"debug below warn", func(z *zap.Logger) { z.Debug("raft tick") }, false, ""},
		{"warn", func(z *zap.Logger) { z.Warn("slow fdatasync", zap.Duration("took", 2*time.Second)) }, true, "WARN"},
		{"error", func(z *zap.Logger) { z.Error("failed to reach the peer URL", zap.String("address", "10.0.0.1:2380")) }, true, "ERROR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, lines := logstest.New()
			z := logs.Zap(log, slog.LevelWarn).With(zap.String("local-member-id", "8e9e05c52164694d"))
			tc.log(z)
			all := lines.All(t)
			if !tc.want {
				if len(all) != 0 {
					t.Fatalf("written: %v", all)
				}
				return
			}
			if len(all) != 1 || all[0]["level"] != tc.level || all[0]["local-member-id"] != "8e9e05c52164694d" {
				t.Fatalf("lines %v; want one %s line with the member id", all, tc.level)
			}
		})
	}
	log, lines := logstest.New()
	logs.Zap(log, slog.LevelWarn).Warn("slow fdatasync", zap.Duration("took", 2*time.Second), zap.Int("n", 3))
	if l := lines.All(t)[0]; l["msg"] != "slow fdatasync" || l["took"] != "2s" || l["n"] != float64(3) {
		t.Fatalf("fields: %v", l)
	}
}
