package changeset

import (
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkPatch makes the patch of a 1 KB order whose status, a price and one line changed:
// what Changes.Patch adds to every updated event.
func BenchmarkPatch(b *testing.B) {
	item := func(status string, price string, extra bool) []byte {
		lines := []any{}
		for i := range 8 {
			lines = append(lines, map[string]any{"sku": fmt.Sprintf("SKU-%04d", i), "qty": i + 1, "price": json.Number(price), "name": "a product with a name"})
		}
		if extra {
			lines = append(lines, map[string]any{"sku": "SKU-9999", "qty": 1, "price": json.Number("1.50"), "name": "one more"})
		}
		m := map[string]any{"id": "ord-0001", "status": status, "customer": map[string]any{"id": "c-1", "name": "Ada", "email": "ada@example.com"},
			"lines": lines, "total": json.Number("123.40"), "tags": []any{"a", "b", "c"}, "updated_at": "2026-12-04T10:00:00Z"}
		out, _ := json.Marshal(m)
		return out
	}
	prev, next := item("open", "9.90", false), item("paid", "9.95", true)
	b.SetBytes(int64(len(prev) + len(next)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Patch(prev, next); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(next)), "item-bytes")
}
