package config

import (
	"net/netip"

	"github.com/goccy/go-yaml/ast"
	"github.com/watukuy/watukuy/admintoken"
)

// Admin is the top-level admin: block: the tokens of the admin API and the status page, and
// how the status page's login cookie is kept behind a proxy.
type Admin struct {
	Tokens []AdminToken
	// SecureCookies marks the login cookie Secure on every request: the page is reached over
	// HTTPS through a proxy that speaks plain HTTP to the listener.
	SecureCookies bool
	// TrustedProxies are the proxies whose X-Forwarded-Proto and X-Forwarded-For the status
	// page believes, matched against a request's remote address.
	TrustedProxies []netip.Prefix
}

// AdminToken is one entry of admin.tokens.
type AdminToken struct {
	ID       string // named in the action log; default admin.tokens[i]
	Secret   string // the token key, usually ${VAR}
	ReadOnly bool
	Line     int
}

var (
	adminKeys      = []string{"tokens", "secureCookies", "trustedProxies"}
	adminTokenKeys = []string{"id", "token", "readOnly"}
)

// AdminTokens is the block's tokens as the admin API takes them.
func (a Admin) AdminTokens() []admintoken.Token {
	out := make([]admintoken.Token, len(a.Tokens))
	for i, t := range a.Tokens {
		out[i] = admintoken.Token{ID: t.ID, Secret: t.Secret, ReadOnly: t.ReadOnly}
	}
	return out
}

// admin decodes admin: {tokens: [{id, token, readOnly}], secureCookies, trustedProxies}.
func (d *decoder) admin(n ast.Node, field string, cfg *Config) {
	d.object(n, field, adminKeys, func(key string, _ pos, v ast.Node, fp string) {
		switch key {
		case "secureCookies":
			cfg.Admin.SecureCookies, _ = d.bool(v, fp)
			return
		case "trustedProxies":
			d.strList(v, fp, "proxy address", func(s string, at pos, ip string) {
				if p, ok := parseProxy(s); ok {
					cfg.Admin.TrustedProxies = append(cfg.Admin.TrustedProxies, p)
				} else {
					d.errAt(at, ip, "want an IP address or a CIDR range such as 10.0.0.0/8, got %q", s)
				}
			})
			return
		}
		d.list(v, fp, func(i int, item ast.Node, ip string) {
			t := AdminToken{ID: index(fp, i), Line: posOf(item).line}
			present := d.object(item, ip, adminTokenKeys, func(key string, _ pos, v ast.Node, kp string) {
				switch key {
				case "id":
					if s, ok := d.str(v, kp); ok && s != "" {
						t.ID = s
					}
				case "token":
					if s, ok := d.str(v, kp); ok {
						if err := admintoken.CheckSecret(s); err != nil {
							d.errAt(posOf(v), kp, "%v", err)
						}
						t.Secret = s
					}
				case "readOnly":
					t.ReadOnly, _ = d.bool(v, kp)
				}
			})
			if _, ok := present["token"]; !ok {
				d.errAt(posOf(item), join(ip, "token"), "required: the secret clients send as Authorization: Bearer <token> (e.g. ${WATUKUY_OPS_TOKEN})")
			}
			for j, o := range cfg.Admin.Tokens {
				if o.ID == t.ID {
					d.errAt(posOf(item), join(ip, "id"), "duplicate token id %q (first at line %d, admin.tokens[%d])", t.ID, o.Line, j)
				}
				if o.Secret == t.Secret && t.Secret != "" {
					d.errAt(posOf(item), join(ip, "token"), "the same token as admin.tokens[%d] (line %d)", j, o.Line)
				}
			}
			cfg.Admin.Tokens = append(cfg.Admin.Tokens, t)
		})
	})
}

// parseProxy reads an entry of admin.trustedProxies: a CIDR range, or one address (a range
// of one).
func parseProxy(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), true
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	return netip.Prefix{}, false
}
