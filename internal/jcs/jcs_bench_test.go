package jcs

import (
	"crypto/sha256"
	"testing"

	refjcs "github.com/gowebpki/jcs"
)

// sampleOrder is a realistic compact e-commerce order item (316 bytes,
// keys deliberately not sorted, one non-ASCII name) shared by the benchmark
// and the allocation test.
var sampleOrder = []byte(`{"status":"paid","id":"ord_8f3c2a9","customer":{"name":"Zoë Łukasiewicz","id":48213,"vip":true},"lines":[{"sku":"TSH-BLK-M","qty":2,"price":19.99},{"sku":"MUG-01","qty":1,"price":12.5}],"totals":{"subtotal":52.48,"tax":4.2,"total":56.68},"created_at":"2024-05-17T09:42:13Z","updated_at":"2024-05-17T10:05:48.512Z"}`)

func BenchmarkCanonicalHash(b *testing.B) {
	item := sampleOrder
	b.Run("watukuy", func(b *testing.B) {
		var c Canonicalizer
		b.SetBytes(int64(len(item)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Hash(item); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("gowebpki-jcs", func(b *testing.B) {
		b.SetBytes(int64(len(item)))
		b.ReportAllocs()
		for b.Loop() {
			out, err := refjcs.Transform(item)
			if err != nil {
				b.Fatal(err)
			}
			_ = sha256.Sum256(out)
		}
	})
}

// BenchmarkCanonicalDeepUnsorted guards against work growing with depth x
// size: 9999 nested objects that all need reordering around a 64 KiB string.
func BenchmarkCanonicalDeepUnsorted(b *testing.B) {
	doc := deepUnsorted(maxDepth-1, 1<<16)
	var c Canonicalizer
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Hash(doc); err != nil {
			b.Fatal(err)
		}
	}
}
