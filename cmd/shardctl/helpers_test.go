package main

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// stopWithSIGTERM stops a runtime as Kubernetes does and requires a clean
// exit within 15 s.
func stopWithSIGTERM(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("did not stop within 15s of SIGTERM")
	}
}
