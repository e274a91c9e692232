// Package vet holds ferry's static checks, built on golang.org/x/tools'
// analysis framework. Run them with `ferry vet ./...`, or with
// `go vet -vettool=$(which ferry) ./...`: the ferry binary speaks go vet's
// tool protocol.
//
// Analyzer (ferrydiscard) finds the mistake ferry started from. A PyTorch
// user wrote
//
//	prev_tensor.to('cpu', non_blocking=True)
//
// as a statement and expected the tensor's memory to leave the GPU. It does
// not: .to returns a new tensor and leaves the old one where it was. In
// ferry the same line is
//
//	prev.To(host)
//
// and it is worse than useless: the copy is a new tensor that nobody
// releases (off a tape it leaks until the process ends; on a tape it holds
// its memory until the step ends). So the check reports every call whose
// result is a *ferry.Tensor, or a []*ferry.Tensor as Split returns, when
// that result is thrown away:
//
//	x.To(dev)           // an expression statement
//	_ = x.Clone()       // assigned to the blank identifier
//	defer x.Clone()     // deferred, or started with go: the result is lost
//
// Chained calls are reported once, at the outermost call whose result is
// lost (`x.Contiguous().To(dev)` names To). Calls that hand back a tensor
// the caller already holds are not reported; see notNew.
//
// A discard that is meant, such as an op run on a tape only to see what it
// saves (the tape releases the result when it closes), is kept quiet by a
// //ferry:discard comment on its line or the line above, best followed by
// the reason:
//
//	tape.WithHooks(count, func() { m.Forward(x) }) //ferry:discard the tape owns the output
//
// The check offers no suggested fix: the right one depends on who owns the
// original (a tape, the caller, a module), which the code does not say.
package vet

import (
	"go/ast"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
)

// Analyzer reports calls whose new *ferry.Tensor (or []*ferry.Tensor)
// result is discarded.
var Analyzer = &analysis.Analyzer{
	Name:     "ferrydiscard",
	Doc:      "report ferry tensors that are made and thrown away, such as x.To(dev) used as a statement\n\nA call like x.To(dev), x.Clone() or ferry.ReLU(x) returns a new tensor. Used as a statement, assigned to _, deferred or started with go, that tensor is never released, and x itself is unchanged: To copies, it does not move. Offload saved tensors with the hooks of package ferry/offload instead.",
	Requires: []*analysis.Analyzer{inspect.Analyzer},
	Run:      run,
}

// tensorPkg is the import path of the package that declares Tensor.
const tensorPkg = "ferry"

// notNew lists the functions and methods whose *ferry.Tensor result is not
// a new tensor but one the caller already holds, keyed by package path,
// receiver type name ("" for a function) and name. Discarding such a
// result is normal, so it is not reported; for the receiver-returning ones
// the receiver expression is checked instead, so that
// `ferry.Zeros(dev, 3).SetName("z")` as a statement is still caught.
var notNew = map[[3]string]kind{
	// Setters that return their receiver so that calls chain
	// (nn.NewParameter: t.SetCategory(...).RequireGrad().SetName(name));
	// called for their effect, their result is routinely dropped.
	{tensorPkg, "Tensor", "SetName"}:     returnsReceiver,
	{tensorPkg, "Tensor", "SetCategory"}: returnsReceiver,
	{tensorPkg, "Tensor", "RequireGrad"}: returnsReceiver,
	// Adopt hands t to the tape, which releases it at Close, and returns t
	// for convenience: `tape.Adopt(batch)` alone is a complete statement.
	{tensorPkg, "Tape", "Adopt"}: returnsArgument,
	// Grad returns the gradient the leaf owns; nothing new is made.
	{tensorPkg, "Tensor", "Grad"}: borrowed,
	// nn.NewParameter marks t as a parameter in place and returns it.
	{tensorPkg + "/nn", "", "NewParameter"}: returnsArgument,
	// A module's Parameters are the tensors it holds ("*": any receiver,
	// the Module interface included).
	{tensorPkg + "/nn", "*", "Parameters"}: borrowed,
	// HostCopy pages a parameter out and returns its master copy on the
	// host, which the pager keeps; the caller often wants only the paging.
	{tensorPkg + "/optim", "HostCopier", "HostCopy"}: borrowed,
	{tensorPkg + "/offload", "Streamer", "HostCopy"}: borrowed,
}

type kind uint8

const (
	borrowed        kind = iota + 1 // a tensor someone else owns
	returnsReceiver                 // the receiver, for chaining
	returnsArgument                 // the first argument
)

func run(pass *analysis.Pass) (any, error) {
	insp := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	filter := []ast.Node{(*ast.ExprStmt)(nil), (*ast.AssignStmt)(nil), (*ast.ValueSpec)(nil),
		(*ast.DeferStmt)(nil), (*ast.GoStmt)(nil)}
	insp.Preorder(filter, func(n ast.Node) {
		switch n := n.(type) {
		case *ast.ExprStmt:
			if call, ok := ast.Unparen(n.X).(*ast.CallExpr); ok {
				check(pass, call, tensorResult(pass, call, -1), "")
			}
		case *ast.DeferStmt:
			check(pass, n.Call, tensorResult(pass, n.Call, -1), " (a deferred call's results are lost)")
		case *ast.GoStmt:
			check(pass, n.Call, tensorResult(pass, n.Call, -1), " (a go statement's results are lost)")
		case *ast.AssignStmt:
			checkBlank(pass, n.Lhs, n.Rhs)
		case *ast.ValueSpec:
			lhs := make([]ast.Expr, len(n.Names))
			for i, id := range n.Names {
				lhs[i] = id
			}
			checkBlank(pass, lhs, n.Values)
		}
	})
	return nil, nil
}

// checkBlank reports tensors assigned to _, one to one (`_ = x.Clone()`)
// or out of a tuple (`_, err := f()`).
func checkBlank(pass *analysis.Pass, lhs, rhs []ast.Expr) {
	if len(rhs) == 1 && len(lhs) > 1 {
		call, ok := ast.Unparen(rhs[0]).(*ast.CallExpr)
		if !ok {
			return
		}
		for i, l := range lhs {
			if isBlank(l) {
				check(pass, call, tensorResult(pass, call, i), "")
			}
		}
		return
	}
	for i, l := range lhs {
		if i >= len(rhs) || !isBlank(l) {
			continue
		}
		if call, ok := ast.Unparen(rhs[i]).(*ast.CallExpr); ok {
			check(pass, call, tensorResult(pass, call, -1), "")
		}
	}
}

func isBlank(e ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == "_"
}

// tensorResult reports whether call's result (i < 0: its only result; else
// the i'th of a tuple) is a *ferry.Tensor or a slice of them.
func tensorResult(pass *analysis.Pass, call *ast.CallExpr, i int) bool {
	tv, ok := pass.TypesInfo.Types[call]
	if !ok || tv.IsType() { // a conversion, not a call
		return false
	}
	t := tv.Type
	if tup, ok := t.(*types.Tuple); ok {
		if i < 0 || i >= tup.Len() {
			return false
		}
		t = tup.At(i).Type()
	}
	if s, ok := t.Underlying().(*types.Slice); ok {
		t = s.Elem()
	}
	return isTensorPtr(t)
}

func isTensorPtr(t types.Type) bool {
	p, ok := types.Unalias(t).(*types.Pointer)
	if !ok {
		return false
	}
	n, ok := types.Unalias(p.Elem()).(*types.Named)
	if !ok {
		return false
	}
	obj := n.Obj()
	return obj.Name() == "Tensor" && obj.Pkg() != nil && obj.Pkg().Path() == tensorPkg
}

// check reports call, whose tensor result is lost, unless the result is
// one the caller already holds; a receiver-returning setter passes the
// question on to its receiver.
// note, if not "", says why the result is lost.
func check(pass *analysis.Pass, call *ast.CallExpr, lost bool, note string) {
	for lost {
		fn := callee(pass, call)
		k := key(fn)
		what, ok := notNew[k]
		if !ok && k[1] != "" {
			what = notNew[[3]string{k[0], "*", k[2]}]
		}
		switch what {
		case borrowed, returnsArgument:
			return
		case returnsReceiver:
			sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
			if !ok {
				return
			}
			inner, ok := ast.Unparen(sel.X).(*ast.CallExpr)
			if !ok {
				return // x.SetName("a"): x is held elsewhere
			}
			call = inner
			continue
		}
		report(pass, call, fn, note)
		return
	}
}

// callee is the function or method call calls, or nil (a function value).
func callee(pass *analysis.Pass, call *ast.CallExpr) *types.Func {
	var id *ast.Ident
	switch f := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = f
	case *ast.SelectorExpr:
		id = f.Sel
	case *ast.IndexExpr: // a generic function instantiated explicitly
		return calleeOf(pass, f.X)
	case *ast.IndexListExpr:
		return calleeOf(pass, f.X)
	default:
		return nil
	}
	fn, _ := pass.TypesInfo.Uses[id].(*types.Func)
	return fn
}

func calleeOf(pass *analysis.Pass, e ast.Expr) *types.Func {
	return callee(pass, &ast.CallExpr{Fun: e})
}

func key(fn *types.Func) [3]string {
	if fn == nil || fn.Pkg() == nil {
		return [3]string{}
	}
	recv := ""
	if sig, ok := fn.Type().(*types.Signature); ok && sig.Recv() != nil {
		t := types.Unalias(sig.Recv().Type())
		if p, ok := t.(*types.Pointer); ok {
			t = types.Unalias(p.Elem())
		}
		if n, ok := t.(*types.Named); ok {
			recv = n.Obj().Name()
		}
	}
	return [3]string{fn.Pkg().Path(), recv, fn.Name()}
}

func report(pass *analysis.Pass, call *ast.CallExpr, fn *types.Func, note string) {
	if meant(pass, call.Pos()) {
		return
	}
	if key(fn) == [3]string{tensorPkg, "Tensor", "To"} {
		x := "x"
		if sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr); ok {
			x = types.ExprString(sel.X)
		}
		pass.Report(analysis.Diagnostic{
			Pos: call.Pos(), End: call.End(),
			Message: x + ".To returns a copy and does not move " + x + "; the discarded copy leaks" + note + ". " +
				"To move saved tensors off the device, push an offloader's hooks on the tape: " +
				"tape.WithHooks(off.Hooks(), f) with off from offload.New (or offload.NewHostSaver(dev)); " +
				"to move " + x + " yourself, assign the result and Release the original",
		})
		return
	}
	pass.Report(analysis.Diagnostic{
		Pos: call.Pos(), End: call.End(),
		Message: "result of " + name(call) + " is discarded" + note + "; the new tensor leaks — assign it, or Release it",
	})
}

// directive marks a discard that is meant.
const directive = "//ferry:discard"

// meant reports whether a //ferry:discard comment sits on pos's line or on
// the line above.
func meant(pass *analysis.Pass, pos token.Pos) bool {
	tf := pass.Fset.File(pos)
	if tf == nil {
		return false
	}
	line := tf.Line(pos)
	for _, f := range pass.Files {
		if pass.Fset.File(f.Pos()) != tf {
			continue
		}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if l := tf.Line(c.Slash); (l == line || l == line-1) && isDirective(c.Text) {
					return true
				}
			}
		}
	}
	return false
}

func isDirective(text string) bool {
	rest, ok := strings.CutPrefix(text, directive)
	return ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t')
}

// name is how the message names the function call calls: x.Clone,
// ferry.ReLU, a function literal.
func name(call *ast.CallExpr) string {
	switch f := ast.Unparen(call.Fun).(type) {
	case *ast.FuncLit:
		return "a function literal"
	case *ast.SelectorExpr:
		return types.ExprString(f.X) + "." + f.Sel.Name
	default:
		return types.ExprString(f)
	}
}
