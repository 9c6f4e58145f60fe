package sink

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestScrubHidesTheURLsSecrets(t *testing.T) {
	raw := "amqp://watukuy:s3cr%21t-pw@broker:5672/?auth_token=tok-123456&heartbeat=10"
	secrets := Secrets(raw)
	base := errors.New("dial broker: user watukuy refused with s3cr!t-pw (token tok-123456)")
	err := Scrub(fmt.Errorf("sink: amqp: %w", base), secrets)
	msg := err.Error()
	for _, s := range []string{"watukuy", "s3cr!t-pw", "tok-123456"} {
		if strings.Contains(msg, s) {
			t.Errorf("%q is in %q", s, msg)
		}
	}
	if !strings.Contains(msg, "[redacted]") || !strings.Contains(msg, "dial broker") {
		t.Errorf("message lost its sense: %q", msg)
	}
	if !errors.Is(err, base) {
		t.Error("errors.Is no longer finds the cause")
	}
	if Scrub(base, nil) != base {
		t.Error("nothing to scrub: want the error itself")
	}
}

func TestSecretsOfAURLWithoutCredentials(t *testing.T) {
	if s := Secrets("nats://127.0.0.1:4222"); len(s) != 0 {
		t.Errorf("Secrets = %q, want none", s)
	}
	if s := Secrets("postgres://u:pw@h/db?password=abcdef&sslmode=disable"); len(s) != 1 || s[0] != "abcdef" {
		t.Errorf("Secrets = %q, want only the query's password (user and password under 4 bytes)", s)
	}
}
