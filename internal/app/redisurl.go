package app

import (
	"fmt"
	"strings"
)

// checkRedisScheme refuses a Redis URL without a scheme ("localhost:6379") and says what to
// add: go-redis fails on it with a URL parser error about a colon in the first path segment.
func checkRedisScheme(rawURL string) error {
	if strings.Contains(rawURL, "://") {
		return nil
	}
	with := redactURL("redis://" + rawURL)
	return fmt.Errorf("redis URL %q has no scheme: add redis:// (%s), or rediss:// for TLS, unix:// for a socket",
		strings.TrimPrefix(with, "redis://"), with)
}
