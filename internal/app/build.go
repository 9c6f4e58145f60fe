package app

import (
	"io"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/config"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/watukuytype"
)

// Build turns the config file's pollers into engine pollers; the config schema says how each
// key sets the poller (config.Build).
func Build(cfg *config.Config, rdb redis.UniversalClient, out io.Writer, brokers *sink.Brokers, log zerolog.Logger) ([]watukuytype.Poller, error) {
	return config.Build(cfg, rdb, out, brokers, log)
}
