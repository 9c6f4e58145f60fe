package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/watukuy/watukuy/internal/config"
	"github.com/watukuy/watukuy/internal/metrics"
)

// reloadState is what Reload needs besides the Env.
type reloadState struct {
	mu sync.Mutex // one reload at a time
	s  Settings   // the settings the process started with (redis and prefix as used)
	// redisFromFile and prefixFromFile: no flag or environment variable set them, so the
	// config file's values were used, and a change in the file would need a restart.
	redisFromFile, prefixFromFile bool
	count                         *prometheus.CounterVec // result
}

func (r *reloadState) init(s Settings, reg prometheus.Registerer) {
	r.s = s
	r.count = metrics.NewReloads(reg)
}

// ReloadOn reloads the config file (Reload) for every signal received on sig, until ctx
// ends. The commands pass it SIGHUP.
func (env *Env) ReloadOn(ctx context.Context, sig <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sig:
			_ = env.Reload(ctx)
		}
	}
}

// Reload re-reads the config file the process started with and applies it from each key's
// next cycle: new URLs, headers, secrets, sinks and schedules, pollers added and removed
// (cycles already running finish with the definition they started with). Everything is built
// and checked before anything changes: a file that does not parse or validate, or whose
// Redis URL or prefix differs from the running ones (they apply only at a restart), keeps
// the running config. The outcome is logged (info: the pollers added, removed and changed;
// error: the reason, with file:line when the file is wrong) and counted in
// watukuy_config_reloads_total.
//
// A removed poller's keys stay registered with their state (inspect shows them); this
// process no longer claims or runs them. The standalone scheduler claims every poller's keys
// whatever its config says, so for it a reload changes only the keys its /metrics report.
func (env *Env) Reload(ctx context.Context) error {
	r := &env.reload
	r.mu.Lock()
	defer r.mu.Unlock()
	err := env.reloadLocked(ctx)
	result := metrics.ReloadOK
	if err != nil {
		result = metrics.ReloadError
		env.Log.Error().Err(err).Msg("config reload failed")
	}
	if r.count != nil {
		r.count.WithLabelValues(result).Inc()
	}
	return err
}

// kept ends the error of a reload that changed nothing.
const kept = "; the running config is kept"

func (env *Env) reloadLocked(ctx context.Context) error {
	r := &env.reload
	env.mu.Lock()
	old, running := env.Config, slices.Clone(env.Pollers)
	env.mu.Unlock()
	if old == nil {
		return errors.New("the process started without a config file: nothing to reload (restart it with --config)")
	}
	cfg, err := config.Load(old.File, nil)
	if err != nil {
		return fmt.Errorf("%w%s", err, kept)
	}
	if r.redisFromFile && cfg.Redis != old.Redis {
		return fmt.Errorf("%s: redis: the Redis URL changed, which applies only at a restart%s", cfg.File, kept)
	}
	if r.prefixFromFile && cfg.Prefix != old.Prefix {
		return fmt.Errorf("%s: prefix: the key prefix changed from %q to %q, which applies only at a restart%s", cfg.File, old.Prefix, cfg.Prefix, kept)
	}
	out := r.s.Out
	if out == nil {
		out = os.Stdout
	}
	env.Brokers.Mark()
	pollers, err := Build(cfg, env.RDB, out, &env.Brokers, env.Log)
	if err == nil {
		pollers, err = only(pollers, r.s.Pollers)
	}
	if err != nil {
		return fmt.Errorf("%w%s", err, kept)
	}
	// Pollers defined in Go (not by the old file) stay.
	for _, p := range running {
		if !slices.ContainsFunc(old.Pollers, func(pc config.Poller) bool { return pc.Name == p.Name }) {
			pollers = append(pollers, p)
		}
	}
	if len(pollers) == 0 {
		return fmt.Errorf("%s: pollers: the file has none (a process without pollers runs nothing)%s", cfg.File, kept)
	}
	tokens, err := env.adminTokens(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w%s", cfg.File, err, kept)
	}
	if err := env.Engine.Replace(cfg.EngineBudgets(), pollers...); err != nil {
		if located := cfg.Locate(err); located != err {
			return fmt.Errorf("%w%s", located, kept) // file:line: pollers[i].field: …
		}
		return fmt.Errorf("%s: %w%s", cfg.File, err, kept)
	}
	env.mu.Lock()
	env.Config, env.Pollers = cfg, pollers
	for _, p := range env.procs {
		p.SetLoginPolicy(cfg.Admin.SecureCookies, cfg.Admin.TrustedProxies)
	}
	env.mu.Unlock()
	env.Metrics.SetPollers(pollers...)
	env.Metrics.SetSinks(cfg.SinkKinds())
	if err := env.Brokers.CloseUnused(); err != nil {
		env.Log.Warn().Err(err).Msg("config reload: closing a sink no poller names any more failed")
	}
	_ = env.Admin.Replace(tokens) // checked above
	added, removed, changed := diffPollers(old, cfg)
	env.Log.Info().Str("config", cfg.File).Strs("added", added).Strs("removed", removed).Strs("changed", changed).
		Int("pollers", len(pollers)).Msg("config reloaded: applies from each key's next cycle")
	if err := env.Engine.Setup(ctx); err != nil {
		return fmt.Errorf("the new config is running, but writing its keys to Redis failed (send SIGHUP again once Redis answers): %w", err)
	}
	return nil
}

// diffPollers names the pollers the new file adds, removes and changes (any setting of its
// entry; a schema file is re-read either way).
func diffPollers(old, cfg *config.Config) (added, removed, changed []string) {
	byName := func(c *config.Config) map[string]config.Poller {
		m := map[string]config.Poller{}
		for _, pc := range c.Pollers {
			m[pc.Name] = pc.WithoutPlaces()
		}
		return m
	}
	was, now := byName(old), byName(cfg)
	for _, pc := range cfg.Pollers {
		if prev, ok := was[pc.Name]; !ok {
			added = append(added, pc.Name)
		} else if !reflect.DeepEqual(prev, now[pc.Name]) {
			changed = append(changed, pc.Name)
		}
	}
	for _, pc := range old.Pollers {
		if _, ok := now[pc.Name]; !ok {
			removed = append(removed, pc.Name)
		}
	}
	return added, removed, changed
}
