package watukuytype

// Layout describes the data layout of a database.
type Layout struct {
	// Version is the recorded layout (0 when none is recorded).
	Version int `json:"version"`
	// Current is the layout this build writes.
	Current int `json:"current"`
	// Empty is true when the database holds no watukuy data yet.
	Empty bool `json:"empty"`
}

// Migration is what Migrate did.
type Migration struct {
	From  int      `json:"from"`
	To    int      `json:"to"`
	Steps []string `json:"steps"`
}

// Err is what a worker makes of the layout: nil when it is this build's (or the database is
// empty), else a *LayoutError (newer: upgrade watukuy; older: run migrate).
func (l Layout) Err() error {
	if l.Version == l.Current || l.Empty {
		return nil
	}
	return &LayoutError{Found: l.Version, Known: l.Current}
}
