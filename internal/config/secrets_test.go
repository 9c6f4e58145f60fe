package config

import (
	"io"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// Secrets of the environment put in the wrong field. Recognisable, and sharing no four
// characters in a row with any message's own words.
const (
	leakToken   = "Qz7vKx2mWp9rTj4nLb8s"
	leakWebhook = "whsec_Vb3kQy9ZpX2mRt7LwN4sHj8dCf6gKe1u"
	leakPlain   = "Qzvxwrtlbsxkgh" // no element of a Go time layout
)

// noPiece fails when msg holds secret, or any four characters of it in a row in any case,
// other than the webhook secrets' public "whsec_".
func noPiece(t *testing.T, msg, secret string) {
	t.Helper()
	lower := strings.ToLower(msg)
	for i := 0; i+minPiece <= len(secret); i++ {
		if i+minPiece <= len("whsec_") && strings.HasPrefix(secret, "whsec_") {
			continue
		}
		if p := strings.ToLower(secret[i : i+minPiece]); strings.Contains(lower, p) {
			t.Errorf("the message holds %q of the secret:\n%s", p, msg)
			return
		}
	}
}

// A ${VAR} in a field whose check fails: the error names the file, line, field and the
// variable, and holds no part of the value, whatever check failed (a type, an enum, a URL, a
// name, a duplicate, a value another package checks).
func TestErrorsHideVariables(t *testing.T) {
	env := envOf(map[string]string{"OPS_TOKEN": leakToken, "WEBHOOK_SECRET": leakWebhook, "ALSO_TOKEN": leakToken, "PLAIN_TOKEN": leakPlain})
	pollerField := func(key, value string) string { // a key of the poller entry
		return strings.Replace(valid, "    request:", "    "+key+": "+value+"\n    request:", 1)
	}
	for _, c := range []struct {
		name, yaml, where, secret string
	}{
		{"integer", strings.Replace(valid, "stdout: {}", "stdout: {}\n      attempts: ${OPS_TOKEN}", 1), "w.yaml:9:17: pollers[0].delivery.attempts: ", leakToken},
		{"number", pollerField("schedule", `{jitter: "${WEBHOOK_SECRET}"}`), "w.yaml:3:24: pollers[0].schedule.jitter: ", leakWebhook},
		{"boolean", pollerField("shadow", `"${OPS_TOKEN}"`), "w.yaml:3:13: pollers[0].shadow: ", leakToken},
		{"duration", pollerField("schedule", `{min: "${WEBHOOK_SECRET}"}`), "w.yaml:3:21: pollers[0].schedule.min: ", leakWebhook},
		{"duration among text", pollerField("leaseTTL", `"1${OPS_TOKEN}"`), "w.yaml:3:15: pollers[0].leaseTTL: ", leakToken},
		{"enum", strings.Replace(valid, "strategy: page", `strategy: "${OPS_TOKEN}"`, 1), "w.yaml:6:17: pollers[0].cursor.strategy: ", leakToken},
		{"format", strings.Replace(valid, "strategy: page", "strategy: timestamp\n      field: t\n      param: since\n      formats: [\"${PLAIN_TOKEN}\"]", 1),
			"w.yaml:9:17: pollers[0].cursor.formats[0]: ", leakToken},
		{"url", strings.Replace(valid, "url: http://api.example.com/orders", `url: "${WEBHOOK_SECRET}/orders"`, 1), "w.yaml:4:12: pollers[0].request.url: ", leakWebhook},
		{"url scheme", strings.Replace(valid, "url: http://api.example.com/orders", `url: "${OPS_TOKEN}://host/x"`, 1), "w.yaml:4:12: pollers[0].request.url: ", leakToken},
		{"poller name", strings.Replace(valid, "name: orders", `name: "${OPS_TOKEN}!"`, 1), "w.yaml:2:11: pollers[0].name: ", leakToken},
		{"partitions listed twice", pollerField("partitions", `["${OPS_TOKEN}", "${ALSO_TOKEN}"]`), "w.yaml:3:34: pollers[0].partitions[1]: ", leakToken},
		{"budget rate", "budgets:\n  - {name: shop, rate: \"${OPS_TOKEN}\"}\n" + valid, "w.yaml:2:24: budgets[0].rate: ", leakToken},
		{"prefix", "prefix: \"{${OPS_TOKEN}}\"\n" + valid, "w.yaml:1:9: prefix: ", leakToken},
		{"webhook secret", strings.Replace(valid, "stdout: {}", "webhook: {url: \"https://h.example.com\", secret: \"${OPS_TOKEN}\"}", 1),
			"pollers[0].delivery.webhook.secret: ", leakToken},
		{"admin token id twice", "admin:\n  tokens:\n    - {id: \"${OPS_TOKEN}\", token: aaaaaaaaaaaaaaaaaaaa}\n    - {id: \"${ALSO_TOKEN}\", token: bbbbbbbbbbbbbbbbbbbb}\n" + valid,
			"w.yaml:4:7: admin.tokens[1].id: ", leakToken},
		{"a webhook secret as an admin token", "admin:\n  tokens:\n    - {token: \"${WEBHOOK_SECRET}\"}\n    - {token: \"${WEBHOOK_SECRET}\"}\n" + valid,
			"w.yaml:4:7: admin.tokens[1].token: the same token as admin.tokens[0]", leakWebhook},
		{"trusted proxy", "admin:\n  trustedProxies: [\"${OPS_TOKEN}\"]\n" + valid, "w.yaml:2:20: admin.trustedProxies[0]: ", leakToken},
		{"secureCookies", "admin:\n  secureCookies: \"${WEBHOOK_SECRET}\"\n" + valid, "w.yaml:2:18: admin.secureCookies: ", leakWebhook},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("w.yaml", []byte(c.yaml), env)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			t.Log(msg)
			named := strings.Contains(msg, "${") || strings.Contains(c.where, "the same token")
			if !strings.Contains(msg, c.where) || !named {
				t.Errorf("the error does not say where and which variable, want %q:\n%s", c.where, msg)
			}
			noPiece(t, msg, leakToken)
			noPiece(t, msg, leakWebhook)
			noPiece(t, msg, leakPlain)
			if strings.Contains(msg, "did you mean") {
				t.Errorf("a suggestion tells what the value is like:\n%s", msg)
			}
		})
	}
}

// A value from the environment that only building the poller finds wrong is hidden the same
// way, and the errors of values written in the file itself still quote them.
func TestBuildErrorsHideVariables(t *testing.T) {
	src := strings.Replace(valid, "    request:", "    schema: \"${OPS_TOKEN}.json\"\n    request:", 1)
	cfg, err := Parse("w.yaml", []byte(src), envOf(map[string]string{"OPS_TOKEN": leakToken}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(cfg, nil, io.Discard, nil, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "pollers[0].schema") {
		t.Fatalf("build: %v", err)
	}
	t.Log(err)
	noPiece(t, err.Error(), leakToken)

	for _, c := range []struct{ yaml, want string }{
		{strings.Replace(valid, "stdout: {}", "stdout: {}\n      attempts: four", 1), `want an integer, got string "four"`},
		{strings.Replace(valid, "strategy: page", "strategy: tokn", 1), `unknown strategy "tokn" (want timestamp, token, page or snapshotDiff); did you mean "token"?`},
		{strings.Replace(valid, "    request:", "    schedule: {min: 5x}\n    request:", 1), `bad duration "5x"`},
	} {
		if _, err := Parse("w.yaml", []byte(c.yaml), envOf(nil)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v\nwant %s", err, c.want)
		}
	}
}

// The redactor alone: a short value is replaced as a word only, a piece of a value left in a
// message hides the message, and a long value is taken out of every field's messages.
func TestRedact(t *testing.T) {
	r := &redactor{}
	r.note("a", "N", "1")
	r.note("b", "LONG", leakToken)
	r.note("c", "C", "abcdef")
	for _, c := range []struct{ field, msg, want string }{
		{"a", "must be at least 10, got 1", "must be at least 10, got ${N}"},
		{"a", "1 is not 10", "${N} is not 10"},
		{"x", "got 1", "got 1"}, // another field's short value: left as it is
		{"x", "quoting " + leakToken + " elsewhere", "quoting ${LONG} elsewhere"},
		{"b", "got " + leakToken[:6] + "…", "not valid here; the value comes from ${LONG} and is not shown"},
		{"c", "got xabcdefx", "not valid here; the value comes from ${C} and is not shown"},
		{"c", `got "abcdef"`, `got "${C}"`},
	} {
		if got := r.redact(c.field, c.msg); got != c.want {
			t.Errorf("redact(%s, %q) = %q, want %q", c.field, c.msg, got, c.want)
		}
	}
	var none *redactor
	if got := none.redact("a", "got 1"); got != "got 1" {
		t.Errorf("nil redactor: %q", got)
	}
}
