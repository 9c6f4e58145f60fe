//go:build unix

package procchaos

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/luascripts"
)

// scriptMonitor reads MONITOR on a direct connection to a redis-server and keeps, per
// script call (EVALSHA or EVAL with its arguments), when and from which connections it ran.
type scriptMonitor struct {
	conn    net.Conn
	done    chan struct{}
	runs    map[string][]scriptRun // written by the reader until done
	trigger atomic.Pointer[monitorTrigger]
}

// monitorTrigger runs fire once, on the first command of a client (not a script's) that
// match accepts.
type monitorTrigger struct {
	match func(cmd string) bool
	fire  func()
}

// arm sets the trigger (fire may arm it again); disarm removes it and reports whether it had
// not fired.
func (m *scriptMonitor) arm(match func(cmd string) bool, fire func()) {
	m.trigger.Store(&monitorTrigger{match: match, fire: fire})
}

func (m *scriptMonitor) disarm() bool { return m.trigger.Swap(nil) != nil }

type scriptRun struct {
	at     float64 // server time, seconds
	client string
}

// watukuyScripts maps the SHA1 of each of watukuy's scripts to its name, and tells the fenced
// ones (those that check the lease's epoch and token first).
var watukuyScripts = sync.OnceValue(func() map[string]scriptInfo {
	m := map[string]scriptInfo{}
	for _, name := range luascripts.Names() {
		if src, err := luascripts.Source(name); err == nil {
			m[redis.NewScript(src).Hash()] = scriptInfo{name: name, fenced: strings.Contains(src, "= fence(")}
		}
	}
	return m
})

type scriptInfo struct {
	name   string
	fenced bool
}

// isBegin tells a MONITOR line's command that runs begin.lua (a lease grant, or a skip).
func isBegin(cmd string) bool {
	return (strings.HasPrefix(cmd, `"evalsha" `) || strings.HasPrefix(cmd, `"eval" `)) && scriptOf(cmd).name == "begin"
}

// evalHeader finds a watukuy script's name in the source an EVAL carries (each file starts
// with "-- name.lua:").
var evalHeader = regexp.MustCompile(`-- ([a-z_]+)\.lua:`)

// scriptOf names the script of a MONITOR line's command; other scripts (asynq's) are "asynq".
func scriptOf(cmd string) scriptInfo {
	if sha, _, ok := strings.Cut(strings.TrimPrefix(cmd, `"evalsha" "`), `"`); ok && strings.HasPrefix(cmd, `"evalsha" `) {
		if si, ok := watukuyScripts()[sha]; ok {
			return si
		}
		return scriptInfo{name: "asynq"}
	}
	for _, m := range evalHeader.FindAllStringSubmatch(cmd, -1) {
		if m[1] != "prelude" {
			for _, si := range watukuyScripts() {
				if si.name == m[1] {
					return si
				}
			}
		}
	}
	return scriptInfo{name: "asynq"}
}

// monitorScripts starts MONITOR on addr, copying every line to logPath.
func monitorScripts(addr, logPath string) (*scriptMonitor, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(c, 64<<10)
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
		_, _ = c.Close(), f.Close()
		return nil, err
	}
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		_, _ = c.Close(), f.Close()
		return nil, fmt.Errorf("MONITOR: %q %v", line, err)
	}
	_ = c.SetDeadline(time.Time{})
	m := &scriptMonitor{conn: c, done: make(chan struct{}), runs: map[string][]scriptRun{}}
	go func() {
		defer close(m.done)
		w := bufio.NewWriter(f)
		defer func() { _, _ = w.Flush(), f.Close() }()
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			_, _ = w.WriteString(line)
			// +1700000000.123456 [0 127.0.0.1:54321] "evalsha" "…" "2" "key" … ("[0 lua]" for
			// the commands a script runs)
			ts, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimRight(line, "\r\n"), "+"), " [")
			if !ok {
				continue
			}
			client, cmd, ok := strings.Cut(rest, "] ")
			if !ok || strings.HasSuffix(client, " lua") {
				continue
			}
			if t := m.trigger.Load(); t != nil && t.match(cmd) && m.trigger.CompareAndSwap(t, nil) {
				t.fire()
			}
			if !strings.HasPrefix(cmd, `"evalsha" `) && !strings.HasPrefix(cmd, `"eval" `) {
				continue
			}
			at, _ := strconv.ParseFloat(ts, 64)
			m.runs[cmd] = append(m.runs[cmd], scriptRun{at: at, client: client})
		}
	}()
	return m, nil
}

// stop ends the monitor and counts the script calls that ran twice: the same arguments from
// another connection at least minGap later (a client's re-send after a read timeout); fenced
// is how many of those were watukuy's fenced scripts, and byName counts them per script.
func (m *scriptMonitor) stop(minGap time.Duration) (resent, fenced int, byName map[string]int) {
	_ = m.conn.Close()
	<-m.done
	byName = map[string]int{}
	for cmd, runs := range m.runs {
		again := false
		for i := 1; i < len(runs) && !again; i++ {
			for j := 0; j < i; j++ {
				if runs[i].client != runs[j].client && runs[i].at-runs[j].at >= minGap.Seconds() {
					again = true
					break
				}
			}
		}
		if again {
			si := scriptOf(cmd)
			resent++
			byName[si.name]++
			if si.fenced {
				fenced++
			}
		}
	}
	return resent, fenced, byName
}

// countsText renders counts per name, sorted: "commit_poll 1, renew 2".
func countsText(byName map[string]int) string {
	var names []string
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, n+" "+strconv.Itoa(byName[n]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
