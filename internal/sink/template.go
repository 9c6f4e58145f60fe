package sink

import (
	"fmt"
	"strings"

	"github.com/watukuy/watukuy/watukuytype"
)

// Template is a broker's subject or routing key that may name the event's poller, partition
// and type: "${poller}", "${partition}" and "${type}" are replaced per event; any other
// "${...}" is an error (environment variables were expanded when the config was read).
type Template struct {
	raw   string
	parts []string // literal, variable, literal, variable, …, literal
}

// Template variables.
const (
	VarPoller    = "poller"
	VarPartition = "partition"
	VarType      = "type"
)

// ParseTemplate reads s; an empty template or an unknown or unterminated variable is an error.
func ParseTemplate(s string) (Template, error) {
	if s == "" {
		return Template{}, fmt.Errorf("empty")
	}
	t := Template{raw: s}
	rest := s
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			t.parts = append(t.parts, rest)
			return t, nil
		}
		end := strings.IndexByte(rest[i:], '}')
		if end < 0 {
			return Template{}, fmt.Errorf("unterminated %q in %q", rest[i:], s)
		}
		name := rest[i+2 : i+end]
		switch name {
		case VarPoller, VarPartition, VarType:
		default:
			return Template{}, fmt.Errorf("unknown variable ${%s} in %q: want ${%s}, ${%s} or ${%s}", name, s, VarPoller, VarPartition, VarType)
		}
		t.parts = append(t.parts, rest[:i], name)
		rest = rest[i+end+1:]
	}
}

// String is the template as written.
func (t Template) String() string { return t.raw }

// Uses reports whether the template names the variable.
func (t Template) Uses(name string) bool {
	for i := 1; i < len(t.parts); i += 2 {
		if t.parts[i] == name {
			return true
		}
	}
	return false
}

// Expand fills the template with ev's poller, partition and type.
func (t Template) Expand(ev watukuytype.Event) string {
	if len(t.parts) == 1 {
		return t.parts[0]
	}
	var b strings.Builder
	for i, p := range t.parts {
		if i%2 == 0 {
			b.WriteString(p)
			continue
		}
		switch p {
		case VarPoller:
			b.WriteString(ev.Poller)
		case VarPartition:
			b.WriteString(ev.Partition)
		case VarType:
			b.WriteString(string(ev.Type))
		}
	}
	return b.String()
}

// Fill replaces every variable with with, e.g. "*" for a NATS subject filter that covers every
// subject the template can give.
func (t Template) Fill(with string) string {
	var b strings.Builder
	for i, p := range t.parts {
		if i%2 == 0 {
			b.WriteString(p)
		} else {
			b.WriteString(with)
		}
	}
	return b.String()
}
