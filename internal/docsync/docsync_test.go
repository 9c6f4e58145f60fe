package docsync

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// docs are the documents this test keeps in step, relative to the module root.
var docs = []string{"README.md", "docs/design.md"}

var (
	// testFunc matches a test, benchmark, example or fuzz target's declaration.
	testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Example|Fuzz)\w*)\(`)
	// citedTest matches a test name in prose, with an optional package qualifier
	// (redisstore.TestX, internal/e2e.TestY).
	citedTest = regexp.MustCompile(`\b((?:[a-z0-9_]+/)*[a-z0-9_]+\.)?((?:Test|Benchmark|Example|Fuzz)[A-Z0-9_]\w*)`)
	// mdLink matches a Markdown link's target.
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// heading matches an ATX heading.
	heading = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *#* *$`)
	// fence matches a fenced code block, whose lines are not headings.
	fence = regexp.MustCompile("(?ms)^```.*?^```")
	// designCite matches a code comment citing a section: "(docs/design.md, Section)" or
	// "(docs/design.md, Section; more)".
	designCite = regexp.MustCompile(`docs/design\.md, ([^;)]+)[;)]`)
)

// root is the module root: the nearest directory above this package holding go.mod.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the package directory")
		}
		dir = parent
	}
}

// goFiles calls fn with the slash path (relative to the root) and content of every .go file
// of the module, skipping hidden directories and testdata.
func goFiles(t *testing.T, rootDir string, fn func(rel, content string)) {
	t.Helper()
	err := filepath.WalkDir(rootDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != rootDir && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(rootDir, p)
		if err != nil {
			return err
		}
		fn(filepath.ToSlash(rel), string(b))
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", rootDir, err)
	}
}

// anchor is the anchor GitHub gives a heading: lower case, punctuation other than '-' and '_'
// dropped, spaces turned into '-'.
func anchor(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown document's headings; a repeated one gets -1, -2,
// ... as on GitHub.
func anchors(md string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(md, ""), -1) {
		a := anchor(m[1])
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// readDocs reads the documents this test checks.
func readDocs(t *testing.T, rootDir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range docs {
		b, err := os.ReadFile(filepath.Join(rootDir, filepath.FromSlash(d)))
		if err != nil {
			t.Fatalf("read %s: %v", d, err)
		}
		out[d] = string(b)
	}
	return out
}

// TestDocsCiteTestsThatExist: every test, benchmark or example a document names is declared
// in a _test.go file of the module, in the named package when the citation names one.
func TestDocsCiteTestsThatExist(t *testing.T) {
	rootDir := root(t)
	dirs := map[string]map[string]bool{} // test name -> base names of the directories declaring it
	goFiles(t, rootDir, func(rel, content string) {
		if !strings.HasSuffix(rel, "_test.go") {
			return
		}
		for _, m := range testFunc.FindAllStringSubmatch(content, -1) {
			if dirs[m[1]] == nil {
				dirs[m[1]] = map[string]bool{}
			}
			dirs[m[1]][path.Base(path.Dir(rel))] = true
		}
	})
	if len(dirs) == 0 {
		t.Fatal("found no test declarations: the walk is broken")
	}
	cited := 0
	for doc, text := range readDocs(t, rootDir) {
		for _, m := range citedTest.FindAllStringSubmatch(text, -1) {
			cited++
			name, pkg := m[2], strings.TrimSuffix(m[1], ".")
			in := dirs[name]
			switch {
			case in == nil:
				t.Errorf("%s cites %s, which no _test.go file declares", doc, m[0])
			case pkg != "" && !in[path.Base(pkg)]:
				t.Errorf("%s cites %s, but %s is not declared in a package %s", doc, m[0], name, path.Base(pkg))
			}
		}
	}
	if cited == 0 {
		t.Fatal("the documents cite no test: the pattern is broken")
	}
}

// TestDocsLinksLandOnHeadings: every relative link of a document to itself or to the other
// document names a file that exists and, when it has an anchor, a heading of that file.
func TestDocsLinksLandOnHeadings(t *testing.T) {
	rootDir := root(t)
	texts := readDocs(t, rootDir)
	heads := map[string]map[string]bool{}
	for d, text := range texts {
		heads[d] = anchors(text)
	}
	links := 0
	for doc, text := range texts {
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			dest := doc
			if file != "" {
				dest = path.Clean(path.Join(path.Dir(doc), file))
			}
			h, ok := heads[dest]
			if !ok {
				// A link to another file of the repository: it must exist.
				if _, err := os.Stat(filepath.Join(rootDir, filepath.FromSlash(dest))); err != nil {
					t.Errorf("%s links to %s, which does not exist", doc, target)
				}
				continue
			}
			links++
			if frag != "" && !h[frag] {
				t.Errorf("%s links to %s: %s has no heading with anchor #%s", doc, target, dest, frag)
			}
		}
	}
	if links == 0 {
		t.Fatal("found no link between the documents: the pattern is broken")
	}
}

// TestCodeCitesDesignSections: a code comment that cites "(docs/design.md, Section)" names a
// heading of docs/design.md.
func TestCodeCitesDesignSections(t *testing.T) {
	rootDir := root(t)
	heads := anchors(readDocs(t, rootDir)["docs/design.md"])
	cites := 0
	goFiles(t, rootDir, func(rel, content string) {
		if strings.HasPrefix(rel, "internal/docsync/") {
			return // this package's own comments describe the form
		}
		for _, m := range designCite.FindAllStringSubmatch(content, -1) {
			cites++
			if !heads[anchor(strings.TrimSpace(m[1]))] {
				t.Errorf("%s cites docs/design.md section %q, which is not a heading there", rel, m[1])
			}
		}
		if strings.Contains(content, "DESIGN.md") {
			t.Errorf("%s cites DESIGN.md, which is not in the repository: cite docs/design.md, Section", rel)
		}
	})
	if cites == 0 {
		t.Fatal("no code comment cites docs/design.md: the pattern is broken")
	}
}
