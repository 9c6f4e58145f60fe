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
}
