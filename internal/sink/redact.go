package sink

import (
	"net/url"
	"strings"
)

// Secrets lists what must never appear in a message about a broker URL: the userinfo's user
// and password, and the values of its query parameters whose names look secret (password,
// token, …). Short values (under 4 bytes) are left out: replacing them would garble a message
// and they are not secrets worth the name.
func Secrets(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	var out []string
	add := func(s string) {
		if len(s) >= 4 {
			out = append(out, s)
		}
	}
	if u.User != nil {
		add(u.User.Username())
		if p, ok := u.User.Password(); ok {
			add(p)
		}
	}
	for name, vs := range u.Query() {
		n := strings.ToLower(name)
		if strings.Contains(n, "pass") || strings.Contains(n, "token") || strings.Contains(n, "secret") || strings.Contains(n, "key") {
			for _, v := range vs {
				add(v)
			}
		}
	}
	return out
}

// Scrub returns err with every secret replaced by "[redacted]" in its message; errors.Is and
// errors.As still see err. Client libraries put their own view of a connection into their
// errors; Scrub keeps a credential from riding along into a log line, a lastError or a
// parked row.
func Scrub(err error, secrets []string) error {
	if err == nil || len(secrets) == 0 {
		return err
	}
	msg := err.Error()
	clean := msg
	for _, s := range secrets {
		clean = strings.ReplaceAll(clean, s, "[redacted]")
		if e := url.QueryEscape(s); e != s {
			clean = strings.ReplaceAll(clean, e, "[redacted]")
		}
	}
	if clean == msg {
		return err
	}
	return &scrubbed{msg: clean, err: err}
}

type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }
