package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/sinks/amqpsink"
	"github.com/watukuy/watukuy/sinks/natssink"
	"github.com/watukuy/watukuy/sinks/pgsink"
)

// checkBrokerURL accepts a URL of one of schemes (for NATS, a comma-separated list of them).
func checkBrokerURL(schemes ...string) func(d *decoder, _ *pollerState, s string, at pos, fp string) {
	return func(d *decoder, _ *pollerState, s string, at pos, fp string) {
		for _, one := range strings.Split(s, ",") {
			scheme, rest, ok := strings.Cut(strings.TrimSpace(one), "://")
			switch {
			case !ok || rest == "":
				d.notA(at, fp, "a "+orList(schemes)+":// URL", httppoll.RedactURL(one))
				return
			case !containsFold(schemes, scheme):
				d.errAt(at, fp, "want a %s:// URL, got %s://", orList(schemes), scheme)
				return
			}
		}
	}
}

func containsFold(xs []string, s string) bool {
	for _, x := range xs {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// checkTemplate checks a subject or routing key: only ${poller}, ${partition} and ${type}.
func checkTemplate(d *decoder, _ *pollerState, s string, at pos, fp string) {
	if _, err := sink.ParseTemplate(s); err != nil {
		d.errAt(at, fp, "%v", err)
	}
}

// checkTable checks a table name: "table" or "schema.table".
func checkTable(d *decoder, _ *pollerState, s string, at pos, fp string) {
	parts := strings.Split(s, ".")
	if len(parts) > 2 || slices.Contains(parts, "") {
		d.errAt(at, fp, "want table or schema.table, got %q", s)
	}
}

// checkNATS: create needs the stream's name.
func checkNATS(d *decoder, ps *pollerState, b blockRead) {
	if n := ps.p.Delivery.NATS; n.Create && n.Stream == "" {
		d.errAt(b.values["create"], join(b.field, "create"), "needs stream: name the stream to create")
	}
}

// file resolves a path relative to the config file's directory; with files on, a file that
// cannot be read is an error here rather than at the first delivery.
func (d *decoder) filePath(s string, at pos, fp string) string {
	s = d.relative(s)
	if d.files {
		if _, err := os.Stat(s); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the message names the path itself
			}
			d.errAt(at, fp, "cannot read %s: %v", s, err)
		}
	}
	return s
}

// broker builds the poller's handler from a broker sink the process shares with every poller
// of the same setting.
func (b *builder) broker(kind string, cfg any, open func() (sink.Broker, error)) error {
	if !b.cfg.Delivers(b.i) {
		b.p.Handler = b.undelivered
		return nil
	}
	br, err := b.brokers.Get(fmt.Sprintf("%s %#v", kind, cfg), open)
	if err != nil {
		return err
	}
	b.p.Handler = br.Handle
	return nil
}

func buildNATS(b *builder) error {
	n := b.pc.Delivery.NATS
	if n == nil {
		return nil
	}
	cfg := natssink.Config{URL: n.URL, Subject: n.Subject, Stream: n.Stream, Create: n.Create, DuplicateWindow: n.DuplicateWindow,
		CredsFile: n.CredsFile, NKeyFile: n.NKeyFile, Token: n.Token,
		CAFile: n.TLS.CAFile, CertFile: n.TLS.CertFile, KeyFile: n.TLS.KeyFile, Timeout: n.Timeout, Name: "watukuy"}
	return b.broker("nats", cfg, func() (sink.Broker, error) { return natssink.New(cfg) })
}

func buildAMQP(b *builder) error {
	a := b.pc.Delivery.AMQP
	if a == nil {
		return nil
	}
	cfg := amqpsink.Config{URL: a.URL, Exchange: a.Exchange, RoutingKey: a.RoutingKey,
		CAFile: a.TLS.CAFile, CertFile: a.TLS.CertFile, KeyFile: a.TLS.KeyFile, Timeout: a.Timeout}
	return b.broker("amqp", cfg, func() (sink.Broker, error) { return amqpsink.New(cfg) })
}

func buildPostgres(b *builder) error {
	pg := b.pc.Delivery.Postgres
	if pg == nil {
		return nil
	}
	cfg := pgsink.Config{URL: pg.URL, Table: pg.Table, Create: pg.Create, MaxConns: int32(pg.MaxConns), Timeout: pg.Timeout}
	return b.broker("postgres", cfg, func() (sink.Broker, error) { return pgsink.New(cfg) })
}
