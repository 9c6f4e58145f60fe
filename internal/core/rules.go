package core

import (
	"fmt"
	"regexp"
	"time"

	"github.com/watukuy/watukuy/internal/schedule"
	"github.com/watukuy/watukuy/watukuytype"
)

// Defaults a poller gets for the settings it leaves at zero, and the patterns its names must
// match. The engine applies them when a poller is registered; the config file's schema
// (internal/config) documents these values and checks a file by the Check functions below, so
// each rule is written once and a config file's errors still name file, line and column.
const (
	// NamePattern is what a poller name must match.
	NamePattern = `^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`
	// PartitionPattern is what a partition must match.
	PartitionPattern = `^[A-Za-z0-9_.:@-]{1,128}$`

	// DefaultScheduleMin is the shortest polling interval.
	DefaultScheduleMin = 5 * time.Second
	// DefaultScheduleMax is the longest polling interval (at least Schedule.Min).
	DefaultScheduleMax = 5 * time.Minute
	// DefaultJitter is the interval's random spread.
	DefaultJitter = 0.1
	// DefaultMaxPagesPerCycle bounds one cycle's pages.
	DefaultMaxPagesPerCycle = 100
	// DefaultCommitMaxItems bounds the changes of one commit script.
	DefaultCommitMaxItems = 1000
	// DefaultCommitMaxBytes bounds the bytes of one commit script.
	DefaultCommitMaxBytes = 1 << 20
	// DefaultTombstoneRetention is how long a deleted identity is remembered.
	DefaultTombstoneRetention = 30 * 24 * time.Hour
	// DefaultConfirmDeletes is how many complete listings must miss an identity.
	DefaultConfirmDeletes = 2
	// DefaultFailures is the consecutive failure count that opens the circuit.
	DefaultFailures = 5
	// DefaultReconcileMaxPages bounds one reconcile listing.
	DefaultReconcileMaxPages = 10_000
	// DefaultConcurrency is how many ordering keys are delivered at once.
	DefaultConcurrency = 4
	// DefaultBatch is how many outbox events one read takes.
	DefaultBatch = 512
	// DefaultAttempts is how often an event is tried in one try, within a cycle.
	DefaultAttempts = 5
	// DefaultRetryBase and DefaultRetryMax bound the waits between the tries of a failed
	// event (doubling), and between the tries of a blocked sink (capped at Schedule.Max).
	DefaultRetryBase = 10 * time.Second
	DefaultRetryMax  = time.Hour
	// DefaultRetryHorizon is how long an event may fail while its sink works before poison:
	// about 30 tries at the default waits.
	DefaultRetryHorizon = 24 * time.Hour
)

var (
	nameRE      = regexp.MustCompile(NamePattern)
	partitionRE = regexp.MustCompile(PartitionPattern)
)

// CheckName reports a poller name that does not match NamePattern.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("name %q must match %s", name, NamePattern)
	}
	return nil
}

// CheckPartition reports a partition that does not match PartitionPattern, or is "-" (the
// unpartitioned key's name in tables and flags).
func CheckPartition(partition string) error {
	if partition == "-" {
		return fmt.Errorf(`partition "-" is reserved: tables and --partition use it for the unpartitioned key`)
	}
	if !partitionRE.MatchString(partition) {
		return fmt.Errorf("partition %q must match %s", partition, PartitionPattern)
	}
	return nil
}

// CheckInterval reports a schedule whose bounds are negative or whose max is below its min.
func CheckInterval(min, max time.Duration) error {
	switch {
	case min < 0 || max < 0:
		return fmt.Errorf("min and max must be positive")
	case max < min:
		return fmt.Errorf("max %v is less than min %v", max, min)
	}
	return nil
}

// CheckJitter reports a jitter fraction outside [0, 1).
func CheckJitter(j float64) error {
	if j < 0 || j >= 1 {
		return fmt.Errorf("jitter %v must be in [0, 1)", j)
	}
	return nil
}

// CycleBackoff fills the zero fields of a poller's failure backoff with schedule.DefaultBackoff's
// (a Max left out is at least Base) and checks it: Base positive, Factor at least 1, Max not
// below Base. The engine's Register and the config file's checks both apply it.
func CycleBackoff(b watukuytype.Backoff) (watukuytype.Backoff, error) {
	d := schedule.DefaultBackoff
	if b.Base == 0 {
		b.Base = d.Base
	}
	if b.Factor == 0 {
		b.Factor = d.Factor
	}
	if b.Max == 0 {
		b.Max = max(d.Max, b.Base)
	}
	switch {
	case b.Base < 0 || b.Max < 0:
		return b, fmt.Errorf("base and max must be positive")
	case b.Factor < 1:
		return b, fmt.Errorf("factor %v must be at least 1", b.Factor)
	case b.Max < b.Base:
		return b, fmt.Errorf("max %v is less than base %v", b.Max, b.Base)
	}
	return b, nil
}

// Check applies every check Register makes to p and returns the first failure, a
// *watukuytype.ConfigError naming the field; it changes nothing. The config file's build runs
// it, so an invalid poller fails `validate` as it would fail at start.
func Check(p watukuytype.Poller) error {
	_, err := WithDefaults(p)
	return err
}
