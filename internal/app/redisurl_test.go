package app

import (
	"strings"
	"testing"
)

// A Redis URL without a scheme is refused with the scheme to add; the password stays out of
// the message.
func TestCheckRedisScheme(t *testing.T) {
	for _, ok := range []string{"redis://localhost:6379", "rediss://h:6380/1", "unix:///tmp/redis.sock", "redis+cluster://a:1?addr=b:2"} {
		if err := checkRedisScheme(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, tc := range []struct{ url, want string }{
		{"localhost:6379", `redis URL "localhost:6379" has no scheme: add redis:// (redis://localhost:6379)`},
		{":secret@10.0.0.5:6379/2", `redis URL "[redacted]@10.0.0.5:6379/2" has no scheme: add redis:// (redis://[redacted]@10.0.0.5:6379/2)`},
	} {
		err := checkRedisScheme(tc.url)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: %v; want %q", tc.url, err, tc.want)
		}
	}
}
