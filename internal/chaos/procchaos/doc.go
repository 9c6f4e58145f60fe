// Package procchaos is the process-level chaos harness: it builds the watukuy binaries and
// runs them as real processes (one scheduler, several workers) against a private primary
// redis-server with a replica, reached through TCP proxies, while the fake APIs change under
// them; then it injects faults on a seeded timeline (SIGKILL, SIGSTOP, Redis kill -9 and
// failover, dropped and stalled connections, lost replies, 429s, the hot key's stages) and
// checks the guarantees with package chaos's Check.
//
// It lives apart from chaos so that chaos, and watukuytest which every user's tests import,
// do not compile its process control (os/exec), asynq and its webhook receiver.
//
// Files by concern: run.go (Options, Report, Run and the run's state), lifecycle.go (setup,
// shutdown, cleanup, building the binaries, their config), osproc.go (starting, signalling
// and respawning processes), redis.go (the redis-servers and reading their state),
// faults.go (the fault timeline and the kills), recovery.go (the mid-fetch kill and its
// recovery time), failover.go (failovers that lose writes), monitor.go (MONITOR of the
// scripts Redis runs), receiver.go (the webhook receiver), hotkey.go (the hot and fp keys)
// and converge.go (waiting for the delivered state and explaining a miss).
package procchaos
