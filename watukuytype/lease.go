package watukuytype

import (
	"context"

	"github.com/watukuy/watukuy/internal/leasectx"
)

// CheckLease fails with a *LeaseLostError when the cycle that ctx belongs to (a request of its
// lanes, a handler call of its deliveries) may have lost its lease; it is nil outside a
// cycle. The cycle checks before every request and delivery, but a process can be frozen (GC,
// SIGSTOP) between that check and the act: HTTP clients call CheckLease as late as they can
// before a request's bytes leave, and a handler can call it right before a side effect it
// cannot take back.
func CheckLease(ctx context.Context) error { return leasectx.Check(ctx) }
