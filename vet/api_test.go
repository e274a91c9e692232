package vet

import (
	"go/types"
	"testing"

	"golang.org/x/tools/go/packages"
)

// TestNamesMatchFerry checks the names this check knows against the real
// ferry packages, so that a rename there cannot leave a stale exception
// here (the analysistest suite runs against a stub, which would not see it).
func TestNamesMatchFerry(t *testing.T) {
	if testing.Short() {
		t.Skip("loads ferry and ferry/nn through go list, which may build them; skipped with -short")
	}
	pkgs, err := packages.Load(&packages.Config{Mode: packages.NeedName | packages.NeedTypes}, tensorPkg, tensorPkg+"/nn", tensorPkg+"/optim", tensorPkg+"/offload")
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]*types.Package{}
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			t.Fatalf("%s: %v", p.PkgPath, p.Errors)
		}
		byPath[p.PkgPath] = p.Types
	}
	lookup := func(k [3]string) *types.Func {
		p := byPath[k[0]]
		if p == nil {
			return nil
		}
		switch k[1] {
		case "":
			fn, _ := p.Scope().Lookup(k[2]).(*types.Func)
			return fn
		case "*": // any receiver: the Module interface will do
			k[1] = "Module"
		}
		tn, _ := p.Scope().Lookup(k[1]).(*types.TypeName)
		if tn == nil {
			return nil
		}
		recv := tn.Type()
		if !types.IsInterface(recv) {
			recv = types.NewPointer(recv)
		}
		obj, _, _ := types.LookupFieldOrMethod(recv, true, p, k[2])
		fn, _ := obj.(*types.Func)
		return fn
	}
	want := map[[3]string]kind{
		{tensorPkg, "Tensor", "To"}:         0,
		{tensorPkg, "Tensor", "Contiguous"}: 0,
		{tensorPkg, "Tensor", "Clone"}:      0,
		{tensorPkg, "Tensor", "Split"}:      0,
	}
	for k, v := range notNew {
		want[k] = v
	}
	for k, v := range want {
		fn := lookup(k)
		if fn == nil {
			t.Errorf("%v: no such function or method in ferry", k)
			continue
		}
		// One tensor result, or a tensor and an error.
		res := fn.Type().(*types.Signature).Results()
		withErr := res.Len() == 2 && res.At(1).Type().String() == "error"
		if !(res.Len() == 1 || withErr) || !(isTensorPtr(res.At(0).Type()) || tensorSlice(res.At(0).Type())) {
			t.Errorf("%v returns %v, not a tensor", k, res)
		}
		if v == returnsArgument && fn.Type().(*types.Signature).Params().Len() == 0 {
			t.Errorf("%v takes no argument to return", k)
		}
	}
}

func tensorSlice(t types.Type) bool {
	s, ok := t.Underlying().(*types.Slice)
	return ok && isTensorPtr(s.Elem())
}
