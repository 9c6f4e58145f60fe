package command

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/watukuy/watukuy/internal/app"
)

// ReloadOnHUP makes SIGHUP reload env's config file (app.Env.Reload) until the returned stop
// is called; stop waits for a reload under way.
func ReloadOnHUP(ctx context.Context, env *app.Env) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		env.ReloadOn(ctx, hup)
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		<-done
	}
}
