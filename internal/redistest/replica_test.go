package redistest_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/watukuy/watukuy/internal/redistest"
)

// TestReplicasFailoverLosesAnAcknowledgedWrite is the failure the harness exists for:
// asynchronous replication acknowledges a write the replica never got, and promoting the
// replica after the primary dies loses it.
func TestReplicasFailoverLosesAnAcknowledgedWrite(t *testing.T) {
	r := redistest.Replicas(t)
	ctx := context.Background()
	primary, replica := r.Primary.Client, r.Replica.Client

	if err := primary.Set(ctx, "k", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.WaitSynced(t)
	if got := replica.Get(ctx, "k").Val(); got != "1" {
		t.Fatalf("k on the synced replica = %q, want 1", got)
	}

	r.CutLink()
	if err := primary.Set(ctx, "k", "2", 0).Err(); err != nil {
		t.Fatalf("the primary did not acknowledge a write with the link cut: %v", err)
	}
	if got := replica.Get(ctx, "k").Val(); got != "1" {
		t.Fatalf("k on the cut-off replica = %q, want 1", got)
	}
	if err := replica.Set(ctx, "k", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
		t.Fatalf("SET on the replica before promotion: %v, want READONLY", err)
	}

	r.KillPrimary()
	if c, err := net.Dial("tcp", strings.TrimPrefix(r.Primary.URL, "redis://")); err == nil {
		_ = c.Close()
		t.Fatal("the primary's port still accepts connections after KillPrimary")
	}
	r.Promote(t)
	if got := replica.Get(ctx, "k").Val(); got != "1" {
		t.Fatalf("k on the promoted replica = %q, want 1 (the write acknowledged after the cut lost)", got)
	}
	if err := replica.Set(ctx, "k", "3", 0).Err(); err != nil {
		t.Fatalf("SET on the promoted replica: %v", err)
	}
	if got := replica.Get(ctx, "k").Val(); got != "3" {
		t.Fatalf("k on the promoted replica after a write = %q, want 3", got)
	}
}

// TestReplicasLinkRestoredCatchesUp: a write made while the link is cut reaches the
// replica once it is restored.
func TestReplicasLinkRestoredCatchesUp(t *testing.T) {
	r := redistest.Replicas(t)
	ctx := context.Background()
	r.CutLink()
	if err := r.Primary.Client.Set(ctx, "k", "during the cut", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Link.Restore()
	r.WaitSynced(t)
	if got := r.Replica.Client.Get(ctx, "k").Val(); got != "during the cut" {
		t.Fatalf("k on the replica after Restore = %q", got)
	}
}
