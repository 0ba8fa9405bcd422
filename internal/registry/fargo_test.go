package registry

import (
	"testing"

	"github.com/hudl/fargo"
	logging "github.com/op/go-logging"
)

// TestFargo drives the registry with hudl/fargo, a real Eureka client, in
// both of its wire formats.
func TestFargo(t *testing.T) {
	logging.SetLevel(logging.CRITICAL, "fargo")
	for _, tc := range []struct {
		name    string
		useJSON bool
		base    string
	}{
		{"xml", false, "/eureka/v2"},
		{"json", true, "/eureka"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, url := startServer(t, Config{Options: Options{ShardsApp: "ZEEBE-SHARDS", ReadStaleness: -1}})
			conn := fargo.NewConn(url + tc.base)
			conn.UseJson = tc.useJSON
			ins := &fargo.Instance{
				InstanceId: "orders-1", HostName: "orders-1.local", App: "ORDERS", IPAddr: "10.0.0.7",
				VipAddress: "orders", SecureVipAddress: "orders-secure", Status: fargo.UP,
				Port: 8080, PortEnabled: true, SecurePort: 8443, SecurePortEnabled: false,
				DataCenterInfo: fargo.DataCenterInfo{Name: fargo.MyOwn},
				LeaseInfo:      fargo.LeaseInfo{RenewalIntervalInSecs: 10, DurationInSecs: 30},
			}
			ins.SetMetadataString("zone", "a")
			if err := conn.RegisterInstance(ins); err != nil {
				t.Fatalf("register: %v", err)
			}
			if err := conn.HeartBeatInstance(ins); err != nil {
				t.Fatalf("heartbeat: %v", err)
			}

			app, err := conn.GetApp("ORDERS")
			if err != nil {
				t.Fatalf("get app: %v", err)
			}
			if len(app.Instances) != 1 {
				t.Fatalf("get app: %d instances, want 1", len(app.Instances))
			}
			got := app.Instances[0]
			if got.InstanceId != "orders-1" || got.IPAddr != "10.0.0.7" || got.Port != 8080 || !got.PortEnabled ||
				got.SecurePort != 8443 || got.SecurePortEnabled || got.Status != fargo.UP || got.LeaseInfo.DurationInSecs != 30 {
				t.Errorf("get app: instance read back as %+v", got)
			}
			if zone, err := got.Metadata.GetString("zone"); err != nil || zone != "a" {
				t.Errorf("metadata zone = %q, %v; want a", zone, err)
			}

			vip, err := conn.GetInstancesByVIPAddress("orders", false)
			if err != nil || len(vip) != 1 {
				t.Fatalf("by VIP: %d instances, %v; want 1", len(vip), err)
			}
			svip, err := conn.GetInstancesByVIPAddress("orders-secure", true)
			if err != nil || len(svip) != 1 {
				t.Fatalf("by secure VIP: %d instances, %v; want 1", len(svip), err)
			}
			if _, err := conn.GetInstancesByVIPAddress("nobody", false); err == nil {
				t.Errorf("an unknown VIP answered without error")
			}

			if err := conn.UpdateInstanceStatus(ins, fargo.OUTOFSERVICE); err != nil {
				t.Fatalf("status override: %v", err)
			}
			// The override holds when the instance registers itself again.
			if err := conn.ReregisterInstance(ins); err != nil {
				t.Fatalf("re-register: %v", err)
			}
			back, err := conn.GetInstance("ORDERS", "orders-1")
			if err != nil {
				t.Fatal(err)
			}
			if back.Status != fargo.OUTOFSERVICE || back.Overriddenstatus != fargo.OUTOFSERVICE {
				t.Errorf("after the override: status %s, overridden %s; want OUT_OF_SERVICE twice", back.Status, back.Overriddenstatus)
			}

			// Not "42": fargo reads XML metadata that looks like a number as a
			// number, and GetString then fails, whatever the server sent.
			if err := conn.AddMetadataString(ins, "build", "b42"); err != nil {
				t.Fatalf("metadata: %v", err)
			}
			back, _ = conn.GetInstance("ORDERS", "orders-1")
			if b, _ := back.Metadata.GetString("build"); b != "b42" {
				t.Errorf("metadata build = %q, want b42", b)
			}

			apps, err := conn.GetApps()
			if err != nil || apps["ORDERS"] == nil {
				t.Fatalf("get apps: %v, %v", apps, err)
			}

			if err := conn.DeregisterInstance(ins); err != nil {
				t.Fatalf("deregister: %v", err)
			}
			err = conn.HeartBeatInstance(ins)
			if err == nil {
				t.Fatalf("heartbeat after deregister succeeded")
			}
			if c, ok := fargo.HTTPResponseStatusCode(err); !ok || c != 404 {
				t.Errorf("heartbeat after deregister: %v, want 404", err)
			}
		})
	}
}
