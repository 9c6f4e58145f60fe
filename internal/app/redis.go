// Package app wires the processes: Redis connection, logging, the engine built from the
// config file (env.go) and its metrics, config reloads, and the runs of the public
// pool.Scheduler and pool.Worker with the flags' settings (run.go). cmd/* and the CLI
// are thin layers over it.
package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

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
		c = redis.NewClient(opt)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redis at %s does not answer: %w", redactURL(rawURL), err)
	}
	return c, nil
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
// least severe level shown ("" is info: debug has a line per HTTP request).
func Logger(format, level string, w io.Writer) (zerolog.Logger, error) {
	if w == nil {
		w = os.Stderr
	}
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
		return zerolog.New(zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}).Level(lvl).With().Timestamp().Logger(), nil
	}
	return zerolog.Logger{}, fmt.Errorf("--log-format %q: want json or console", format)
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
