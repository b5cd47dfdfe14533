// Command celref evaluates DRA device selectors with Kubernetes' own CEL environment (the package
// k8s.io/dynamic-resource-allocation/cel that kube-scheduler's allocator calls), so that the tests can hold
// gpusched's evaluator (scheduler/api/cel.py) against the API server's and kube-scheduler's answers.
//
// Input on stdin, one JSON object a line: {"expression": "...", "device": {"driver": "...", "attributes":
// {"name": {"int": 1} | {"bool": true} | {"string": "x"} | {"version": "1.2.3"}}, "capacity": {"name":
// {"value": "40Gi"}}}}. Output on stdout, one JSON object a line, in the same order: {"compile": "message"}
// when the expression does not compile (the API server refuses such a DeviceClass or claim), else {"matches":
// true|false} or {"error": "message"} (the device does not match, as kube-scheduler treats it).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	dracel "k8s.io/dynamic-resource-allocation/cel"
)

type device struct {
	Driver     string                                                    `json:"driver"`
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes"`
	Capacity   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity  `json:"capacity"`
}

type request struct {
	Expression string `json:"expression"`
	Device     device `json:"device"`
}

func main() {
	compiler := dracel.GetCompiler(dracel.Features{EnableConsumableCapacity: true})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintf(os.Stderr, "celref: bad input line: %v\n", err)
			os.Exit(2)
		}
		result := compiler.CompileCELExpression(req.Expression, dracel.Options{})
		if result.Error != nil {
			_ = out.Encode(map[string]any{"compile": result.Error.Detail})
			continue
		}
		matches, _, err := result.DeviceMatches(context.Background(), dracel.Device{
			Driver:     req.Device.Driver,
			Attributes: req.Device.Attributes,
			Capacity:   req.Device.Capacity,
		})
		if err != nil {
			_ = out.Encode(map[string]any{"error": err.Error()})
			continue
		}
		_ = out.Encode(map[string]any{"matches": matches})
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "celref: reading stdin: %v\n", err)
		os.Exit(2)
	}
}
