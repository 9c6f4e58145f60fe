package redisstore

import "github.com/watukuy/watukuy/internal/core"

// The state-hash fields that this package or its Lua scripts name. This block is the one list
// of them: TestStateFieldsAreOneList fails when a script reads or writes a field that is not
// here, when a field here is named by no script and no code of this package, and when a field
// spelled here differs from core's constant of the same name. core owns what the fields mean;
// those it exports are aliased, the rest are spelled here.
const (
	fieldNextDue   = core.FieldNextDue
	fieldPaused    = core.FieldPaused
	fieldThrottled = core.FieldThrottled
	fieldTrigger   = core.FieldTrigger
	// fieldDeleted marks a key removed by partitions delete (core's fieldDeleted).
	fieldDeleted = "deleted"
	// fieldIncarnation is where a partition deleted and added again starts its identities'
	// lives (core's fieldIncarnation).
	fieldIncarnation = "incarnation"
	// fieldRemoved marks a key whose poller left the config (core's fieldRemoved); resume
	// clears it.
	fieldRemoved = "removed"
	// fieldLastLife is the highest identity generation ever given (commit_poll.lua writes it,
	// delete_key.lua starts the next incarnation above it); no Go code reads it.
	fieldLastLife = "lastLife"
)
