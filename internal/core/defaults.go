package core

import "time"

// Defaults a poller gets for the settings it leaves at zero, and the patterns its names must
// match. The engine applies them when a poller is registered; the config file's reference
// (internal/config) documents the same values.
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
	// DefaultAttempts is how often an event is tried within a cycle before poison.
	DefaultAttempts = 5
)
