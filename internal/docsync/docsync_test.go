package docsync

import (
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// rootDocs are the documents at the module root this test keeps in step; every Markdown file
// under docsDir is kept in step too, found by walking it, so a new document is covered the
// moment it is added.
var rootDocs = []string{"README.md", "CHANGELOG.md"}

// docsDir holds the documents by reader.
const docsDir = "docs"

var (
	// testFunc matches a test, benchmark, example or fuzz target's declaration.
	testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Example|Fuzz)\w*)\(`)
	// citedTest matches a test name in prose, with an optional package qualifier
	// (redisstore.TestX, internal/e2e.TestY).
	citedTest = regexp.MustCompile(`\b((?:[a-z0-9_]+/)*[a-z0-9_]+\.)?((?:Test|Benchmark|Example|Fuzz)[A-Z0-9_]\w*)`)
	// mdLink matches a Markdown link's (or image's) target.
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// heading matches an ATX heading.
	heading = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *#* *$`)
	// fence matches a fenced code block, whose lines are neither headings nor links.
	fence = regexp.MustCompile("(?ms)^ *```.*?^ *```")
	// designCite matches a code comment citing a section: "(docs/design.md, Section)" or
	// "(docs/design.md, Section; more)".
	designCite = regexp.MustCompile(`docs/design\.md, ([^;)]+)[;)]`)
	// forWhom is how a document under docs/ says, right after its title, who it is for.
	forWhom = regexp.MustCompile(`^# .+\n\nFor \S`)
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

// docPaths lists the documents this test checks, relative to the module root: rootDocs, then
// every .md file under docsDir, sorted.
func docPaths(t *testing.T, rootDir string) []string {
	t.Helper()
	var under []string
	err := filepath.WalkDir(filepath.Join(rootDir, docsDir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(rootDir, p)
			if err != nil {
				return err
			}
			under = append(under, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", docsDir, err)
	}
	if len(under) == 0 {
		t.Fatalf("no Markdown file under %s: the walk is broken", docsDir)
	}
	slices.Sort(under)
	return append(slices.Clone(rootDocs), under...)
}

// readDocs reads the documents this test checks.
func readDocs(t *testing.T, rootDir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range docPaths(t, rootDir) {
		b, err := os.ReadFile(filepath.Join(rootDir, filepath.FromSlash(d)))
		if err != nil {
			t.Fatalf("read %s: %v", d, err)
		}
		out[d] = string(b)
	}
	return out
}

// brokenLinks returns a line for every relative link of texts (document path → content) that
// does not resolve: a target file that exists neither among texts nor for exists, or an
// anchor that is not a heading of a target among texts. Links inside fenced code blocks are
// code, not links. It also returns how many links it checked.
func brokenLinks(texts map[string]string, exists func(rel string) bool) (broken []string, checked int) {
	heads := map[string]map[string]bool{}
	for d, text := range texts {
		heads[d] = anchors(text)
	}
	for _, doc := range slices.Sorted(maps.Keys(texts)) {
		for _, m := range mdLink.FindAllStringSubmatch(fence.ReplaceAllString(texts[doc], ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			file, frag, _ := strings.Cut(target, "#")
			dest := doc
			if file != "" {
				dest = path.Clean(path.Join(path.Dir(doc), file))
			}
			h, isDoc := heads[dest]
			switch {
			case !isDoc && strings.HasSuffix(dest, ".md") && (dest == docsDir || strings.HasPrefix(dest, docsDir+"/")):
				// Every document under docs/ is among texts: one that is not does not exist.
				broken = append(broken, doc+" links to "+target+", which does not exist")
			case !isDoc:
				if !exists(dest) {
					broken = append(broken, doc+" links to "+target+", which does not exist")
				}
			case frag != "" && !h[frag]:
				broken = append(broken, doc+" links to "+target+": "+dest+" has no heading with anchor #"+frag)
			}
		}
	}
	return broken, checked
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
	texts := readDocs(t, rootDir)
	for _, doc := range slices.Sorted(maps.Keys(texts)) {
		for _, m := range citedTest.FindAllStringSubmatch(texts[doc], -1) {
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

// TestDocsLinksLandOnHeadings: every relative link of every document names a file that exists
// and, when it has an anchor and names a document, a heading of that document.
func TestDocsLinksLandOnHeadings(t *testing.T) {
	rootDir := root(t)
	broken, checked := brokenLinks(readDocs(t, rootDir), func(rel string) bool {
		_, err := os.Stat(filepath.Join(rootDir, filepath.FromSlash(rel)))
		return err == nil
	})
	for _, b := range broken {
		t.Error(b)
	}
	if checked == 0 {
		t.Fatal("found no relative link in the documents: the pattern is broken")
	}
}

// TestBrokenLinksAreFound: the link check itself finds a link to a document under docs/ that
// does not exist, an anchor that is no heading (in another document and in the same one), and
// a missing file elsewhere, and passes the links that resolve.
func TestBrokenLinksAreFound(t *testing.T) {
	texts := map[string]string{
		"README.md": "# R\n\n## Install\n\n" +
			"[ok](docs/a.md#the-part) [ok](docs/a.md) [ok](#install) [ok](deploy/alerts.yaml) [web](https://example.com/x.md)\n" +
			"[gone](docs/gone.md) [gone](docs/gone.md#x) [no heading](docs/a.md#nope) [self](#nope) [gone file](deploy/nope.yaml)\n" +
			"```\n[in code](docs/also-gone.md)\n```\n",
		"docs/a.md": "# A\n\nFor tests.\n\n## The part\n\n[back](../README.md#install) [png](pic.png) [wrong](../README.md#the-part)\n",
	}
	files := map[string]bool{"deploy/alerts.yaml": true, "docs/pic.png": true}
	broken, checked := brokenLinks(texts, func(rel string) bool { return files[rel] })
	want := []string{
		"README.md links to docs/gone.md, which does not exist",
		"README.md links to docs/gone.md#x, which does not exist",
		"README.md links to docs/a.md#nope: docs/a.md has no heading with anchor #nope",
		"README.md links to #nope: README.md has no heading with anchor #nope",
		"README.md links to deploy/nope.yaml, which does not exist",
		"docs/a.md links to ../README.md#the-part: README.md has no heading with anchor #the-part",
	}
	if !slices.Equal(broken, want) {
		t.Errorf("broken links:\n%s\nwant:\n%s", strings.Join(broken, "\n"), strings.Join(want, "\n"))
	}
	if checked != 12 {
		t.Errorf("checked %d links, want 12 (links in code and absolute URLs are not checked)", checked)
	}
}

// TestDocsSayWhoTheyAreFor: every document under docs/ starts, after its title, with a
// paragraph that says who it is for, and the README's map lists it.
func TestDocsSayWhoTheyAreFor(t *testing.T) {
	rootDir := root(t)
	texts := readDocs(t, rootDir)
	readme := texts["README.md"]
	for doc, text := range texts {
		if !strings.HasPrefix(doc, docsDir+"/") {
			continue
		}
		if !forWhom.MatchString(text) {
			t.Errorf("%s does not start with its title and a paragraph \"For <reader>...\"", doc)
		}
		if !strings.Contains(readme, "]("+doc+")") {
			t.Errorf("README.md does not list %s in its map of the documents", doc)
		}
	}
}

// TestCodeCitesDesignSections: a code comment that cites "(docs/design.md, Section)" names a
// heading of docs/design.md.
func TestCodeCitesDesignSections(t *testing.T) {
	rootDir := root(t)
	heads := anchors(readDocs(t, rootDir)[docsDir+"/design.md"])
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
