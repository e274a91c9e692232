package ferry_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// Every doc comment of an exported function, type, or method of an
// exported type, in the module's non-test, non-generated files, starts
// with the name it documents (go doc shows the comment under that name;
// Go's convention allows "A", "An" or "The" before it). A function renamed
// or exported without its comment following ("merge takes…" on Merge) is
// caught here.
func TestDocCommentsStartWithTheirName(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// The go command ignores testdata and names starting with . or _.
			if n := d.Name(); path != "." && (n == "testdata" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		files++
		check := func(pos token.Pos, name string, doc *ast.CommentGroup) {
			if doc != nil && !docStartsWith(doc.Text(), name) {
				first, _, _ := strings.Cut(strings.TrimSpace(doc.Text()), "\n")
				t.Errorf("%s: the doc comment of %s starts %q", fset.Position(pos), name, first)
			}
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() && (d.Recv == nil || exportedReceiver(d.Recv.List[0].Type)) {
					check(d.Pos(), d.Name.Name, d.Doc)
				}
			case *ast.GenDecl:
				if d.Tok != token.TYPE {
					continue
				}
				for _, s := range d.Specs {
					ts := s.(*ast.TypeSpec)
					doc := ts.Doc
					if doc == nil && !d.Lparen.IsValid() {
						doc = d.Doc // type T …: the comment sits on the declaration
					}
					if ts.Name.IsExported() {
						check(ts.Pos(), ts.Name.Name, doc)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d files: not the module's root?", files)
	}
}

// docStartsWith reports whether doc's first word, after an optional
// article, is name.
func docStartsWith(doc, name string) bool {
	text := strings.TrimSpace(doc)
	for _, a := range []string{"A ", "An ", "The "} {
		text = strings.TrimPrefix(text, a)
	}
	rest, ok := strings.CutPrefix(text, name)
	if !ok {
		return false
	}
	r, _ := utf8.DecodeRuneInString(rest)
	return !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_')
}

// exportedReceiver reports whether a method's receiver type (T, *T, T[P]
// or *T[P]) is exported, so that go doc lists the method.
func exportedReceiver(e ast.Expr) bool {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	switch g := e.(type) {
	case *ast.IndexExpr:
		e = g.X
	case *ast.IndexListExpr:
		e = g.X
	}
	id, ok := e.(*ast.Ident)
	return ok && id.IsExported()
}
