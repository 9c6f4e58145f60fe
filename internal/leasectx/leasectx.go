// Package leasectx carries a cycle's lease check in its context: the engine puts it there
// (With), and watukuytype.CheckLease, which handlers and HTTP clients call, runs it (Check).
package leasectx

import "context"

// key is the context key of the check.
type key struct{}

// With returns ctx carrying check.
func With(ctx context.Context, check func() error) context.Context {
	return context.WithValue(ctx, key{}, check)
}

// Check runs ctx's check; nil outside a cycle.
func Check(ctx context.Context) error {
	if g, ok := ctx.Value(key{}).(func() error); ok {
		return g()
	}
	return nil
}
