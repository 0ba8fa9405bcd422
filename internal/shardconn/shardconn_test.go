package shardconn

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/shardctl/shardctl/internal/credential"
)

func TestParseTLS(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"", TLSPlain, ""}, {"false", TLSPlain, ""}, {"true", TLSVerified, ""}, {"insecure", TLSInsecure, ""}, {"yes", "", `tls "yes"`},
	} {
		got, err := ParseTLS(tc.in)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseTLS(%q) = %q, %v", tc.in, got, err)
		}
	}
}

func TestRefusal(t *testing.T) {
	for _, tc := range []struct {
		err     error
		refused bool
		says    string
	}{
		{status.Error(codes.Unauthenticated, "no token"), true, "UNAUTHENTICATED: no token"},
		{status.Error(codes.PermissionDenied, "not yours"), true, "PERMISSION_DENIED: not yours"},
		{status.Error(codes.Unavailable, "gone"), false, ""},
		{errors.New("plain"), false, ""},
		{nil, false, ""},
	} {
		if got := Refused(tc.err); got != tc.refused {
			t.Errorf("Refused(%v) = %v", tc.err, got)
		}
		if tc.refused && Refusal(tc.err) != tc.says {
			t.Errorf("Refusal(%v) = %q, want %q", tc.err, Refusal(tc.err), tc.says)
		}
	}
}

// A shard names its credential or gets the default; the token goes on
// the outgoing metadata of the caller's own calls only.
func TestAccessTargets(t *testing.T) {
	dir := t.TempDir()
	for name, tok := range map[string]string{"default": "d-token", "eu": "eu-token"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a, err := NewAccess("", map[string]credential.Config{"default": {TokenFile: filepath.Join(dir, "default")}, "eu": {TokenFile: filepath.Join(dir, "eu")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, tc := range []struct{ cred, header, err string }{
		{"", "Bearer d-token", ""},
		{"eu", "Bearer eu-token", ""},
		{"us", "", `names credential "us", which is not defined here (defined: default, eu)`},
	} {
		target, err := a.Target("s", "127.0.0.1:1", "true", tc.cred)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Target(%q): %v, want %q", tc.cred, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		ctx, err := Own(context.Background(), target.Credential)
		if err != nil {
			t.Fatal(err)
		}
		md, _ := metadata.FromOutgoingContext(ctx)
		if got := md.Get(AuthorizationMD); len(got) != 1 || got[0] != tc.header {
			t.Errorf("credential %q: outgoing authorization %v, want %q", tc.cred, got, tc.header)
		}
	}
	if _, err := a.Target("s", "127.0.0.1:1", "maybe", ""); err == nil {
		t.Error("a bad TLS mode was taken")
	}
	var none *Access
	if target, err := none.Target("s", "127.0.0.1:1", "", ""); err != nil || target.Credential != nil {
		t.Errorf("a nil Access: %+v, %v", target, err)
	}
	if ctx, err := Own(context.Background(), nil); err != nil || len(metadata.ValueFromIncomingContext(ctx, AuthorizationMD)) != 0 {
		t.Errorf("Own without a credential: %v", err)
	}
}
