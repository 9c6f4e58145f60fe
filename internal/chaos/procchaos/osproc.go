//go:build unix

package procchaos

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// contLocked sends SIGCONT to a stopped process (r.mu held).
func (r *processRun) contLocked(p *osProc) {
	if !r.procs.stopped[p] {
		return
	}
	delete(r.procs.stopped, p)
	d := time.Since(r.procs.stoppedAt[p])
	delete(r.procs.stoppedAt, p)
	if err := p.signal(syscall.SIGCONT); err == nil {
		if d > processLeaseTTL {
			r.logf("SIGCONT %s (pid %d) after %s, past its lease: whatever it writes now must be fenced", p.name, p.pid(), d.Round(10*time.Millisecond))
		} else {
			r.logf("SIGCONT %s (pid %d) after %s (cut short by the quiesce)", p.name, p.pid(), d.Round(10*time.Millisecond))
		}
	}
}

// startLocked starts a scheduler or a worker (r.mu held). A process that exits on its own
// (e.g. it started while Redis was down) is started again while the run lasts.
func (r *processRun) startLocked(kind string) (*osProc, error) {
	r.procs.nextID++
	id := fmt.Sprintf("%s-%d", kind, r.procs.nextID)
	args := []string{"--config", r.files.cfgPath, "--listen", "off", "--log-format", "console", "--instance-id", id}
	bin := filepath.Join(r.files.binDir, "watukuy-scheduler")
	if kind == "worker" {
		bin = filepath.Join(r.files.binDir, "watukuy-worker")
		// Deliveries wait for the replica: a failover that loses a commit whose events were
		// delivered would leave the consumer ahead of the promoted replica's state.
		args = append(args, "--concurrency", "4", "--drain-timeout", "2s", "--wait-replicas", "1")
	}
	p, err := startProc(id, bin, args, filepath.Join(r.files.dir, "logs", id+".log"), []string{"HOOK_SECRET=" + processSecret})
	if err != nil {
		return nil, err
	}
	go func() {
		<-p.done
		if p.expect.Load() || r.finished.Load() {
			return
		}
		r.respawn(kind, p)
	}()
	return p, nil
}

// respawn replaces a process that exited on its own.
func (r *processRun) respawn(kind string, old *osProc) {
	time.Sleep(200 * time.Millisecond) // let the cause (Redis restarting) pass
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished.Load() {
		return
	}
	delete(r.procs.stopped, old)
	delete(r.procs.stoppedAt, old)
	np, err := r.startLocked(kind)
	if err != nil {
		r.logf("respawn %s: %v", old.name, err)
		return
	}
	if old == r.procs.scheduler {
		r.procs.scheduler = np
	}
	for i, w := range r.procs.workers {
		if w == old {
			r.procs.workers[i] = np
		}
	}
	r.rep.Respawns++
	r.logf("%s exited on its own (%v; see logs/%s.log); started %s", old.name, old.err, old.name, np.name)
}

// osProc is one running binary.
type osProc struct {
	name   string
	cmd    *exec.Cmd
	logf   *os.File
	done   chan struct{} // closed when the process has exited; err is then set
	err    error
	expect atomic.Bool // the harness ends it: no respawn
}

func startProc(name, bin string, args []string, logPath string, env []string) (*osProc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("chaos: start %s: %w", bin, err)
	}
	p := &osProc{name: name, cmd: cmd, logf: f, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *osProc) pid() int { return p.cmd.Process.Pid }

func (p *osProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *osProc) signal(s os.Signal) error {
	if p.exited() {
		return os.ErrProcessDone
	}
	return p.cmd.Process.Signal(s)
}

// kill sends SIGKILL and waits for the exit.
func (p *osProc) kill() {
	p.expect.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stopAll sends SIGTERM to every process of procs still running and waits for each up to
// grace, then SIGKILLs it; ended is told how each ended (its exit error, or killed), from
// the waiting goroutines.
func stopAll(procs []*osProc, grace time.Duration, ended func(p *osProc, err error, killed bool)) {
	var wg sync.WaitGroup
	for _, p := range procs {
		p.expect.Store(true)
		if err := p.signal(syscall.SIGTERM); err != nil {
			continue
		}
		wg.Go(func() {
			t := time.NewTimer(grace)
			defer t.Stop()
			select {
			case <-p.done:
				ended(p, p.err, false)
			case <-t.C:
				p.kill()
				ended(p, nil, true)
			}
		})
	}
	wg.Wait()
}
