package watukuytype

// ProbeItem is one item of a probed page, as the diff would see it.
type ProbeItem struct {
	Identity string `json:"identity"`
	Version  string `json:"version,omitempty"`
	// Fingerprint is the start of the version fingerprint the item's row would store.
	Fingerprint string `json:"fingerprint,omitempty"`
	Tombstone   bool   `json:"tombstone,omitempty"`
	// Issue says why the item would be parked as invalid ("" when it is fine).
	Issue string `json:"issue,omitempty"`
}

// ProbeResult is what Probe saw on a poller's first page.
type ProbeResult struct {
	Poller      string      `json:"poller"`
	Partition   string      `json:"partition"`
	Items       []ProbeItem `json:"items"`
	Next        string      `json:"nextCursor"`
	HasMore     bool        `json:"hasMore"`
	NotModified bool        `json:"notModified,omitempty"`
	Invalid     int         `json:"invalid"`
	// Fields are the first item's top-level field names, sorted: what identity, version and
	// a cursor field can name (nil when the page is empty or its first item is no object).
	Fields []string `json:"fields,omitempty"`
	// Stall says why the cursor could not move past the probed page (the engine's
	// CursorStallError on the request after it, e.g. a full page of items that all share one
	// change time and no tie-breaker); "" when it moves on or there is no next page.
	Stall string `json:"stall,omitempty"`
	// Repeated is true when the next page came back with exactly the first page's items: the
	// API ignores the paging parameter, and a listing would read that page again until
	// MaxPagesPerCycle.
	Repeated bool `json:"repeated,omitempty"`
}

// ListingEstimate is what ProbeListing read of one complete listing (a SnapshotDiff live lane,
// a Reconcile lane): how many pages it has and how many cycles the engine takes to read it.
type ListingEstimate struct {
	Lane     Lane `json:"lane"`
	Pages    int  `json:"pages"` // read by the probe
	Items    int  `json:"items"` // on those pages
	Complete bool `json:"complete"`
	// PagesPerCycle is the most pages one cycle reads of it (MaxPagesPerCycle; for a
	// reconcile, also Reconcile.MaxPages); Cycles is Pages over it, rounded up: the cycles
	// the listing takes when Complete, the fewest it takes when not.
	PagesPerCycle int `json:"pagesPerCycle"`
	Cycles        int `json:"cycles"`
}
