package watukuytype

import "context"

// leaseCheckKey carries a cycle's lease check to the code that acts for it.
type leaseCheckKey struct{}

// WithLeaseCheck returns ctx carrying check, which CheckLease runs.
func WithLeaseCheck(ctx context.Context, check func() error) context.Context {
	return context.WithValue(ctx, leaseCheckKey{}, check)
}

// CheckLease fails with a *LeaseLostError when the cycle that ctx belongs to (a request of its
// lanes, a handler call of its deliveries) may have lost its lease; it is nil outside a
// cycle. The cycle checks before every request and delivery, but a process can be frozen (GC,
// SIGSTOP) between that check and the act: HTTP clients call CheckLease as late as they can
// before a request's bytes leave, and a handler can call it right before a side effect it
// cannot take back.
func CheckLease(ctx context.Context) error {
	if g, ok := ctx.Value(leaseCheckKey{}).(func() error); ok {
		return g()
	}
	return nil
}
