package jsonfmt

import (
	"math/big"
	"slices"
	"strconv"
)

// Confluent's rules for objects and arrays: properties and tuple items
// added or removed are judged by the content model (open, closed, or
// partially open through patternProperties / additionalProperties /
// additionalItems), the rest keyword by keyword.

// jsonOpenProperties reports an open content model: any property may hold
// anything.
func jsonOpenProperties(n *jsonNode) bool {
	return len(n.patternProperties) == 0 && n.additionalProperties == nil && !n.closedProperties
}

// jsonPartialProperty is the schema a partially open content model gives
// an undeclared property: the first matching patternProperties entry, else
// additionalProperties; nil when the property is not allowed.
func jsonPartialProperty(n *jsonNode, name string) *jsonNode {
	for _, p := range n.patternProperties {
		if p.re.MatchString(name) {
			return p.schema
		}
	}
	return n.additionalProperties
}

func (d *jsonDiffer) object(o, u *jsonNode) {
	names := jsonUnionKeys(o.properties, u.properties)

	d.push("required")
	for _, name := range names {
		op, uop := o.properties[name], u.properties[name]
		if op == nil || uop == nil {
			continue
		}
		switch or, ur := o.required[name], u.required[name]; {
		case or && !ur:
			d.addAt(name, "REQUIRED_ATTRIBUTE_REMOVED")
		case !or && ur && uop.def != nil:
			d.addAt(name, "REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED")
		case !or && ur:
			d.addAt(name, "REQUIRED_ATTRIBUTE_ADDED")
		}
	}
	d.pop(1)

	d.push("properties")
	for _, name := range names {
		op, up := o.properties[name], u.properties[name]
		d.push(name)
		switch {
		case up == nil:
			d.propertyRemoved(op, u, name)
		case op == nil:
			d.propertyAdded(o, up, u, name)
		default:
			d.compare(op, up)
		}
		d.pop(1)
	}
	d.pop(1)

	d.push("dependencies")
	for _, name := range jsonUnionKeys(o.propertyDependencies, u.propertyDependencies) {
		od, ud := o.propertyDependencies[name], u.propertyDependencies[name]
		switch {
		case ud == nil:
			d.addAt(name, "DEPENDENCY_ARRAY_REMOVED")
		case od == nil:
			d.addAt(name, "DEPENDENCY_ARRAY_ADDED")
		default:
			os, us := jsonSet(od), jsonSet(ud)
			oInU, uInO := jsonSubset(os, us), jsonSubset(us, os)
			switch {
			case oInU && uInO:
			case oInU:
				d.addAt(name, "DEPENDENCY_ARRAY_EXTENDED")
			case uInO:
				d.addAt(name, "DEPENDENCY_ARRAY_NARROWED")
			default:
				d.addAt(name, "DEPENDENCY_ARRAY_CHANGED")
			}
		}
	}
	for _, name := range jsonUnionKeys(o.schemaDependencies, u.schemaDependencies) {
		os, us := o.schemaDependencies[name], u.schemaDependencies[name]
		switch {
		case us == nil:
			d.addAt(name, "DEPENDENCY_SCHEMA_REMOVED")
		case os == nil:
			d.addAt(name, "DEPENDENCY_SCHEMA_ADDED")
		default:
			d.push(name)
			d.compare(os, us)
			d.pop(1)
		}
	}
	d.pop(1)

	d.push("additionalProperties")
	switch {
	case o.closedProperties != u.closedProperties:
		if u.closedProperties {
			d.add("ADDITIONAL_PROPERTIES_REMOVED")
		} else {
			d.add("ADDITIONAL_PROPERTIES_ADDED")
		}
	case o.additionalProperties == nil && u.additionalProperties != nil:
		d.add("ADDITIONAL_PROPERTIES_NARROWED")
	case o.additionalProperties != nil && u.additionalProperties == nil:
		d.add("ADDITIONAL_PROPERTIES_EXTENDED")
	default:
		d.compare(o.additionalProperties, u.additionalProperties)
	}
	d.pop(1)

	d.bound("maxProperties", "MAX_PROPERTIES", o.maxProperties, u.maxProperties)
	d.bound("minProperties", "MIN_PROPERTIES", o.minProperties, u.minProperties)

	d.push("propertyNames")
	d.compare(o.propertyNames, u.propertyNames)
	d.pop(1)
}

// propertyRemoved: the update no longer declares a property the original
// did. Only the update's content model decides what it accepts there.
func (d *jsonDiffer) propertyRemoved(op, u *jsonNode, name string) {
	if jsonOpenProperties(u) {
		d.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")
		return
	}
	if partial := jsonPartialProperty(u, name); partial != nil {
		s := d.sub()
		ok := s.compareOK(op, partial)
		d.keep(s)
		if ok {
			d.add("PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
		} else {
			d.add("PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
		}
		return
	}
	if jsonDeref(op).kind == jsonKindFalse {
		d.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
	} else {
		d.add("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")
	}
}

// propertyAdded: the update declares a property the original did not.
// Only the original's content model says what old data may hold there.
func (d *jsonDiffer) propertyAdded(o, up, u *jsonNode, name string) {
	if jsonOpenProperties(o) {
		switch {
		case jsonAcceptsAll(jsonDeref(up)):
			d.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
		case u.required[name]:
			d.add("REQUIRED_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
		default:
			d.add("OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
		}
		return
	}
	if partial := jsonPartialProperty(o, name); partial != nil {
		s := d.sub()
		ok := s.compareOK(partial, up)
		d.keep(s)
		if ok {
			d.add("PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
		} else {
			d.add("PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
		}
	}
	switch {
	case u.required[name] && up.def != nil:
		d.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL")
	case u.required[name]:
		d.add("REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
	default:
		d.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
	}
}

func (d *jsonDiffer) array(o, u *jsonNode) {
	d.push("items")
	d.compare(o.allItems, u.allItems)
	d.pop(1)

	shared := min(len(o.items), len(u.items))
	for i := range shared {
		d.push("items", strconv.Itoa(i))
		d.compare(o.items[i], u.items[i])
		d.pop(2)
	}
	for i := shared; i < len(o.items); i++ {
		d.push("items", strconv.Itoa(i))
		d.itemRemoved(o.items[i], u)
		d.pop(2)
	}
	for i := shared; i < len(u.items); i++ {
		d.push("items", strconv.Itoa(i))
		d.itemAdded(o, u.items[i])
		d.pop(2)
	}

	d.push("additionalItems")
	switch {
	case o.closedItems != u.closedItems:
		if u.closedItems {
			d.add("ADDITIONAL_ITEMS_REMOVED")
		} else {
			d.add("ADDITIONAL_ITEMS_ADDED")
		}
	case o.additionalItems == nil && u.additionalItems != nil:
		d.add("ADDITIONAL_ITEMS_NARROWED")
	case o.additionalItems != nil && u.additionalItems == nil:
		d.add("ADDITIONAL_ITEMS_EXTENDED")
	default:
		d.compare(o.additionalItems, u.additionalItems)
	}
	d.pop(1)

	d.bound("maxItems", "MAX_ITEMS", o.maxItems, u.maxItems)
	d.bound("minItems", "MIN_ITEMS", o.minItems, u.minItems)
	if o.uniqueItems && !u.uniqueItems {
		d.addAt("uniqueItems", "UNIQUE_ITEMS_REMOVED")
	} else if !o.uniqueItems && u.uniqueItems {
		d.addAt("uniqueItems", "UNIQUE_ITEMS_ADDED")
	}

	d.push("contains")
	d.compare(o.contains, u.contains)
	d.pop(1)
	if o.contains != nil && u.contains != nil {
		// minContains defaults to 1 wherever contains is present.
		one := big.NewRat(1, 1)
		om, um := o.minContains, u.minContains
		if om == nil {
			om = one
		}
		if um == nil {
			um = one
		}
		d.bound("minContains", "MIN_CONTAINS", om, um)
		d.bound("maxContains", "MAX_CONTAINS", o.maxContains, u.maxContains)
	}
}

// jsonOpenItems reports an array whose items past the tuple may be
// anything.
func jsonOpenItems(n *jsonNode) bool { return n.additionalItems == nil && !n.closedItems }

func (d *jsonDiffer) itemRemoved(oi, u *jsonNode) {
	if jsonOpenItems(u) {
		d.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")
		return
	}
	if u.additionalItems != nil {
		s := d.sub()
		ok := s.compareOK(oi, u.additionalItems)
		d.keep(s)
		if ok {
			d.add("ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
		} else {
			d.add("ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
		}
		return
	}
	if jsonDeref(oi).kind == jsonKindFalse {
		d.add("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL")
	} else {
		d.add("ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL")
	}
}

func (d *jsonDiffer) itemAdded(o, ui *jsonNode) {
	if jsonOpenItems(o) {
		if jsonAcceptsAll(jsonDeref(ui)) {
			d.add("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL")
		} else {
			d.add("ITEM_ADDED_TO_OPEN_CONTENT_MODEL")
		}
		return
	}
	if o.additionalItems != nil {
		s := d.sub()
		ok := s.compareOK(o.additionalItems, ui)
		d.keep(s)
		if ok {
			d.add("ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
		} else {
			d.add("ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
		}
		return
	}
	d.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")
}

// jsonUnionKeys lists the keys of a and b, sorted.
func jsonUnionKeys[V any](a, b map[string]V) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
