// The resolved config decoded through viper: UnmarshalExact into a struct
// made from rehearse.Keys (one field per key, typed by its kind), with a
// decode hook that reads every value with admit's parsers, whichever
// layer it came from; then each value stored in its Policy or seat field.

package cmd

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"

	"github.com/retrygate/retrygate/admit"
	"github.com/retrygate/retrygate/rehearse"
	"github.com/retrygate/retrygate/rehearse/seat"
)

// A key's value as decoded, one type per kind; a pointer to one is nil
// when no layer sets the key.
type (
	durationValue time.Duration
	countValue    int64
	amountValue   float64 // rehearse.USD and rehearse.Amount
	rateValue     float64
	boolValue     bool
	textValue     string
	listValue     []string
	wordsValue    []string
	mapValue      map[string]any
	routesValue   []rehearse.Route
)

func kindType(k rehearse.Kind) reflect.Type {
	switch k {
	case rehearse.Duration:
		return reflect.TypeFor[*durationValue]()
	case rehearse.Count:
		return reflect.TypeFor[*countValue]()
	case rehearse.USD, rehearse.Amount:
		return reflect.TypeFor[*amountValue]()
	case rehearse.Rate:
		return reflect.TypeFor[*rateValue]()
	case rehearse.Bool:
		return reflect.TypeFor[*boolValue]()
	case rehearse.Text:
		return reflect.TypeFor[*textValue]()
	case rehearse.List:
		return reflect.TypeFor[*listValue]()
	case rehearse.Words:
		return reflect.TypeFor[*wordsValue]()
	case rehearse.Routes:
		return reflect.TypeFor[*routesValue]()
	}
	return reflect.TypeFor[mapValue]()
}

// targetType is what the config decodes into: configTarget, a struct
// with a field per section and key, tagged with its name, each key's
// value typed by its kind (kindType); a seat's or a metric's name ('*')
// makes a map. config_target.go is written from rehearse.Keys by
// TestConfigTargetIsTheKeys: building it with reflect.StructOf on every
// run cost each admit and record in a shell loop about 0.8 ms.
func targetType() reflect.Type { return reflect.TypeFor[configTarget]() }

// decodeHook reads a value, from any layer, for the type of its key's
// kind: one parser per kind, the one flags and the log use too.
func decodeHook(from, to reflect.Value) (any, error) {
	v := from.Interface()
	var err error
	var s string
	switch to.Type() {
	case reflect.TypeFor[listValue]():
		l, err := listOf(v, commaList)
		return listValue(l), err
	case reflect.TypeFor[wordsValue]():
		l, err := listOf(v, strings.Fields)
		return wordsValue(l), err
	case reflect.TypeFor[routesValue]():
		return routesOf(v)
	case reflect.TypeFor[mapValue]():
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("expected a mapping, got %s", what(v))
		}
		return mapValue(m), nil
	case reflect.TypeFor[durationValue](), reflect.TypeFor[countValue](), reflect.TypeFor[amountValue](),
		reflect.TypeFor[rateValue](), reflect.TypeFor[boolValue](), reflect.TypeFor[textValue]():
		if s, err = single(v); err != nil {
			return nil, err
		}
	default:
		return v, nil
	}
	switch to.Type() {
	case reflect.TypeFor[durationValue]():
		d, err := admit.ParseDuration(s)
		return durationValue(d), err
	case reflect.TypeFor[countValue]():
		n, err := admit.ParseCount(s)
		return countValue(n), err
	case reflect.TypeFor[amountValue]():
		f, err := admit.ParseAmount(s)
		return amountValue(f), err
	case reflect.TypeFor[rateValue]():
		f, err := admit.ParseRate(s)
		return rateValue(f), err
	case reflect.TypeFor[boolValue]():
		b, err := parseBoolValue(s)
		return boolValue(b), err
	}
	return textValue(s), nil
}

// single is one value as text: as written in a file, a variable or a
// flag (admit's parsers read it); a list or a mapping is no single value.
func single(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case int:
		return strconv.Itoa(v), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	}
	return "", fmt.Errorf("expected a single value, got %s", what(v))
}

// what names a value's shape for an error.
func what(v any) string {
	switch v.(type) {
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("%T", v)
}

// routesOf reads the routes key: a list of {model, fallback}, each
// model one string, each fallback a list of seat names.
func routesOf(v any) (routesValue, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("expected a list of {model, fallback}, got %s", what(v))
	}
	out := make(routesValue, 0, len(list))
	for i, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, &elemError{i, fmt.Errorf("expected {model, fallback}, got %s", what(e))}
		}
		var r rehearse.Route
		for k, val := range m {
			var err error
			switch k {
			case "model":
				r.Model, err = single(val)
			case "fallback":
				r.Fallback, err = listOf(val, commaList)
			default:
				err = fmt.Errorf("unknown key %q (want model, fallback)", k)
			}
			if err != nil {
				return nil, &elemError{i, fmt.Errorf("%s: %w", k, err)}
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// elemError is a list's element at fault.
type elemError struct {
	i   int
	err error
}

func (e *elemError) Error() string { return fmt.Sprintf("[%d]: %v", e.i, e.err) }

// listOf reads a list of strings: a list, or one string split by split.
func listOf(v any, split func(string) []string) ([]string, error) {
	switch v := v.(type) {
	case string:
		return split(v), nil
	case []any:
		out := make([]string, 0, len(v))
		for i, e := range v {
			s, err := single(e)
			if err != nil {
				return nil, &elemError{i, fmt.Errorf("expected a string, got %s", what(e))}
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("expected a list, got %s", what(v))
}

// commaList splits "a, b" at its commas; a blank string is no list.
func commaList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	out := strings.Split(s, ",")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// resolved is the config decoded: the policy (the default policy's
// values where no layer set a key), the seats, and the keys read whole.
type resolved struct {
	policy     rehearse.Policy
	seats      map[string]seat.Config
	fallback   []string
	routes     []rehearse.Route
	log        string
	thresholds map[string][]string
}

// resolve decodes the config once, at its first use; an error names the
// flag, variable or file:line and the key of the value at fault.
func (c *config) resolve() (*resolved, error) {
	if c.resolved == nil && c.err == nil {
		c.resolved, c.err = c.decode()
	}
	return c.resolved, c.err
}

func (c *config) decode() (*resolved, error) {
	target := reflect.New(targetType())
	if err := c.v.UnmarshalExact(target.Interface(), viper.DecodeHook(mapstructure.DecodeHookFuncValue(decodeHook))); err != nil {
		return nil, c.decodeError(err)
	}
	r := &resolved{policy: rehearse.DefaultPolicy(), seats: map[string]seat.Config{}, log: defaultLog, thresholds: map[string][]string{}}
	if err := c.store(r, target.Elem(), ""); err != nil {
		return nil, err
	}
	// A seat the file names with no key set under it is a seat all the same.
	for k := range c.lines {
		if name, ok := strings.CutPrefix(k, "seats."); ok && !strings.Contains(name, ".") {
			if _, ok := r.seats[name]; !ok {
				r.seats[name] = seat.Config{Name: name}
			}
		}
	}
	return r, nil
}

// decodeError is the first value at fault, in the file's order: where
// it was set and why it was refused.
func (c *config) decodeError(err error) error {
	var leaves []*mapstructure.DecodeError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case *mapstructure.DecodeError:
			n := len(leaves)
			walk(e.Unwrap())
			if len(leaves) == n {
				leaves = append(leaves, e)
			}
		case interface{ Unwrap() []error }:
			for _, e := range e.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	if len(leaves) == 0 {
		return badInputErr(err)
	}
	key := func(e *mapstructure.DecodeError) string {
		return strings.NewReplacer("[", ".", "]", "").Replace(e.Name())
	}
	e := slices.MinFunc(leaves, func(a, b *mapstructure.DecodeError) int {
		return cmp.Or(c.lines[key(a)]-c.lines[key(b)], strings.Compare(key(a), key(b)))
	})
	inner := e.Unwrap()
	var ue *mapstructure.UnconvertibleTypeError
	if errors.As(inner, &ue) {
		inner = fmt.Errorf("expected a mapping of keys, got %s", what(ue.Value))
	}
	var ee *elemError
	if errors.As(inner, &ee) {
		return badInput("%s%v", c.where(key(e)), ee)
	}
	return badInput("%s: %v", c.where(key(e)), inner)
}

// store puts each value set in v (the target, or a part of it at prefix)
// into its field.
func (c *config) store(r *resolved, v reflect.Value, prefix string) error {
	switch {
	case v.Kind() == reflect.Struct:
		for i := range v.NumField() {
			if err := c.store(r, v.Field(i), joinKey(prefix, v.Type().Field(i).Tag.Get("mapstructure"))); err != nil {
				return err
			}
		}
		return nil
	case v.Kind() == reflect.Map && v.Type() != reflect.TypeFor[mapValue]():
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			if err := c.store(r, v.MapIndex(k), joinKey(prefix, k.String())); err != nil {
				return err
			}
		}
		return nil
	case v.IsNil():
		return nil
	}
	k := rehearse.KeyNamed(prefix)
	switch {
	case k.Field != nil:
		return c.set(k, prefix, k.Field(&r.policy), v.Interface())
	case k.SeatField != nil:
		name := strings.Split(prefix, ".")[1]
		sc := r.seats[name]
		sc.Name = name
		err := c.set(k, prefix, k.SeatField(&sc), v.Interface())
		r.seats[name] = sc
		return err
	case k.Name == rehearse.KeyFallback:
		r.fallback = *v.Interface().(*listValue)
	case k.Name == rehearse.KeyRoutes:
		r.routes = *v.Interface().(*routesValue)
	case k.Name == rehearse.KeyLog:
		r.log = string(*v.Interface().(*textValue))
	case k.Name == rehearse.KeyThresholds:
		r.thresholds[strings.TrimPrefix(prefix, "thresholds.")] = *v.Interface().(*listValue)
	}
	return nil
}

// set stores one decoded value in the field dst points to, checking a
// count against its key's cap.
func (c *config) set(k *rehearse.Key, name string, dst, val any) error {
	switch v := val.(type) {
	case *durationValue:
		*dst.(*time.Duration) = time.Duration(*v)
	case *countValue:
		if k.Max > 0 && int64(*v) > k.Max {
			return badInput("%s: %d is too large (at most %d)", c.where(name), *v, k.Max)
		}
		switch d := dst.(type) {
		case *int:
			*d = int(*v)
		case *int64:
			*d = int64(*v)
		}
	case *amountValue:
		setFloat(dst, float64(*v))
	case *rateValue:
		setFloat(dst, float64(*v))
	case *boolValue:
		*dst.(*bool) = bool(*v)
	case *textValue:
		*dst.(*string) = string(*v)
	case *wordsValue:
		*dst.(*[]string) = *v
	case mapValue:
		switch d := dst.(type) {
		case *map[string]any:
			*d = v
		case *map[string]string: // headers: a name → the variable holding its value
			*d = make(map[string]string, len(v))
			for _, h := range slices.Sorted(maps.Keys(v)) {
				s, err := single(v[h])
				if err != nil {
					return badInput("%s: %v", c.where(name+"."+h), err)
				}
				(*d)[h] = s
			}
		}
	}
	return nil
}

// setFloat stores an amount in a float64, or in a *float64 (a price that
// defaults to another when unset).
func setFloat(dst any, f float64) {
	switch d := dst.(type) {
	case *float64:
		*d = f
	case **float64:
		*d = &f
	}
}
