// Package app wires the processes: Redis connection, logging, the engine built from the
// config file (env.go) and its metrics, config reloads, and the runs of the public
// pool.Scheduler and pool.Worker with the flags' settings (run.go). cmd/* and the CLI
// are thin layers over it.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// Connect opens a Redis client from a URL: redis://, rediss:// and unix:// for one node;
// redis+cluster://host:port?addr=host2:port2 (or rediss+cluster://) for a cluster.
func Connect(ctx context.Context, rawURL string) (redis.UniversalClient, error) {
	if rawURL == "" {
		return nil, fmt.Errorf("no Redis URL: pass --redis, set WATUKUY_REDIS_URL, or put redis: in the config file")
	}
	if err := checkRedisScheme(rawURL); err != nil {
		return nil, err
	}
	var c redis.UniversalClient
	var node *redis.Options // one node's options; nil for a cluster
	if rest, ok := strings.CutPrefix(rawURL, "redis+cluster://"); ok {
		opt, err := redis.ParseClusterURL("redis://" + rest)
		if err != nil {
			return nil, fmt.Errorf("redis URL: %w", err)
		}
		c = redis.NewClusterClient(opt)
	} else if rest, ok := strings.CutPrefix(rawURL, "rediss+cluster://"); ok {
		opt, err := redis.ParseClusterURL("rediss://" + rest)
		if err != nil {
			return nil, fmt.Errorf("redis URL: %w", err)
		}
		c = redis.NewClusterClient(opt)
	} else {
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis URL: %w", err)
		}
		c, node = redis.NewClient(opt), opt
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, pingError(pctx, rawURL, node, err)
	}
	return c, nil
}

// pingError says why the first PING failed. A server that answered with an error refused
// what the URL asks (a DB index out of range, a password): that is said with the server's
// own words, and for a DB index with how many databases the server has when it tells. Only a
// server that gave no answer "does not answer".
func pingError(ctx context.Context, rawURL string, node *redis.Options, err error) error {
	at := redactURL(rawURL)
	var refused redis.Error
	if !errors.As(err, &refused) {
		return fmt.Errorf("redis at %s does not answer: %w", at, err)
	}
	if node != nil && strings.Contains(err.Error(), "DB index is out of range") {
		return fmt.Errorf("redis at %s: DB %d is out of range%s: %w", at, node.DB, databases(ctx, node), err)
	}
	return fmt.Errorf("redis at %s answered with an error: %w", at, err)
}

// databases is " (the server has N databases: 0 to N-1)" as the server's CONFIG says on DB 0,
// or "" when it does not say (a managed Redis that hides CONFIG).
func databases(ctx context.Context, node *redis.Options) string {
	o := *node
	o.DB = 0
	c := redis.NewClient(&o)
	defer c.Close()
	v, err := c.ConfigGet(ctx, "databases").Result()
	if err != nil {
		return ""
	}
	n, err := strconv.Atoi(v["databases"])
	if err != nil || n < 1 {
		return ""
	}
	return fmt.Sprintf(" (the server has %d databases: 0 to %d)", n, n-1)
}

func redactURL(u string) string {
	if at := strings.LastIndex(u, "@"); at >= 0 {
		if s := strings.Index(u, "://"); s >= 0 && s < at {
			return u[:s+3] + "[redacted]@" + u[at+1:]
		}
	}
	return u
}

// Logger returns the process logger: JSON by default, "console" for humans; level is the
// least severe level shown ("" is info: debug has a line per HTTP request). Console lines are
// coloured only on a terminal, and never with NO_COLOR set (no-color.org).
func Logger(format, level string, w io.Writer) (zerolog.Logger, error) {
	if w == nil {
		w = os.Stderr
	}
	noColor := !colour(w, os.Getenv("NO_COLOR"))
	w = zerolog.SyncWriter(w) // cycles log from several delivery goroutines at once
	lvl := zerolog.InfoLevel
	if level != "" {
		var err error
		if lvl, err = zerolog.ParseLevel(level); err != nil || lvl < zerolog.DebugLevel || lvl > zerolog.ErrorLevel {
			return zerolog.Logger{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
		}
	}
	switch format {
	case "", "json":
		return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
	case "console":
		return zerolog.New(zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: noColor}).Level(lvl).With().Timestamp().Logger(), nil
	}
	return zerolog.Logger{}, fmt.Errorf("--log-format %q: want json or console", format)
}

// colour reports whether console output to w may carry ANSI colours: only when w is a
// terminal and noColor (the value of NO_COLOR) is empty. A file, a pipe or a buffer gets
// plain text.
func colour(w io.Writer, noColor string) bool {
	if noColor != "" {
		return false
	}
	f, ok := w.(interface{ Fd() uintptr })
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// RouteRedisLogs sends go-redis's own log lines (a failed dial, retried; a bad pool
// connection) to log at debug, instead of raw lines on stderr ahead of the clean error that
// names what failed. go-redis has one logger per process, so the last call wins.
func RouteRedisLogs(log zerolog.Logger) { redis.SetLogger(redisLogger{log}) }

// redisLogger is go-redis's logging interface over zerolog.
type redisLogger struct{ log zerolog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug().Str("from", "go-redis").Msg(strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
}
