#!/usr/bin/env python3
"""Writes tests/deploy/schemas/*.json: JSON Schemas of the Kubernetes kinds
deploy/k8s/ uses, derived from the TypeScript declarations of two pinned npm
packages. Run by hand when a pin changes; CI only reads the output.

  npm pack kubernetes-types@1.30.0 @kubernetes-models/prometheus-operator@6.0.0
  mkdir kt po && tar xzf kubernetes-types-1.30.0.tgz -C kt \
    && tar xzf kubernetes-models-prometheus-operator-6.0.0.tgz -C po
  tests/deploy/vendor_schemas.py kt/package po/package

Every field a declaration lists becomes a property, a field without `?` is
required, and no other field is allowed (additionalProperties: false), as the
API server's strict field validation does. Empty interfaces (RawExtension)
accept any object.
"""

import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# The kinds deploy/k8s/ may use: apiVersion/kind -> (module, type name).
K8S_KINDS = {
    "v1/ConfigMap": ("core/v1", "ConfigMap"),
    "v1/Namespace": ("core/v1", "Namespace"),
    "v1/PersistentVolumeClaim": ("core/v1", "PersistentVolumeClaim"),
    "v1/Pod": ("core/v1", "Pod"),
    "v1/Secret": ("core/v1", "Secret"),
    "v1/Service": ("core/v1", "Service"),
    "v1/ServiceAccount": ("core/v1", "ServiceAccount"),
    "apps/v1/DaemonSet": ("apps/v1", "DaemonSet"),
    "apps/v1/Deployment": ("apps/v1", "Deployment"),
    "apps/v1/StatefulSet": ("apps/v1", "StatefulSet"),
    "rbac.authorization.k8s.io/v1/ClusterRole": ("rbac/v1", "ClusterRole"),
    "rbac.authorization.k8s.io/v1/Role": ("rbac/v1", "Role"),
    "rbac.authorization.k8s.io/v1/RoleBinding": ("rbac/v1", "RoleBinding"),
    "networking.k8s.io/v1/NetworkPolicy": ("networking/v1", "NetworkPolicy"),
    "policy/v1/PodDisruptionBudget": ("policy/v1", "PodDisruptionBudget"),
}
PO_KINDS = {"monitoring.coreos.com/v1/ServiceMonitor": "ServiceMonitor"}
PO_PREFIX = "IComGithubPrometheusOperatorPrometheusOperatorPkgApisMonitoringV1"


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"^\s*//.*$", "", text, flags=re.M)


def split_top(text, sep):
    """Splits text at sep outside <>, {}, [] and quotes."""
    parts, depth, quote, cur = [], 0, None, ""
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "<{[(":
            depth += 1
        elif ch in ">}])":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    if cur.strip():
        parts.append(cur)
    return [p.strip() for p in parts]


def parse_body(body):
    """`name?: Type;` members of an interface or class body."""
    fields = {}
    for member in split_top(body, ";"):
        m = re.match(r'^(readonly\s+)?"?([A-Za-z0-9_$\-.]+)"?(\?)?\s*:\s*(.+)$',
                     member, flags=re.S)
        if not m or member.startswith(("static ", "constructor")):
            continue
        fields[m.group(2)] = (m.group(4).strip(), m.group(3) is None)
    return fields


def parse_module(text):
    """{name: ("object", fields, extends) | ("alias", type)} and imports."""
    text = strip_comments(text)
    decls, imports = {}, {}
    for m in re.finditer(r'import\s*\{([^}]*)\}\s*from\s*"([^"]+)"', text):
        for name in m.group(1).split(","):
            if name.strip():
                imports[name.strip()] = m.group(2)
    pos = 0
    pattern = re.compile(
        r"export\s+(?:declare\s+)?(interface|class|type)\s+([A-Za-z0-9_]+)"
        r"([^={]*)(=|\{)")
    while True:
        m = pattern.search(text, pos)
        if not m:
            break
        kind, name, heading, opener = m.groups()
        if opener == "{":
            depth, i = 1, m.end()
            while depth:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            body = text[m.end():i - 1]
            if kind != "class":
                ext = re.search(r"extends\s+([A-Za-z0-9_,\s]+)", heading)
                extends = [e.strip() for e in ext.group(1).split(",")] if ext else []
                decls[name] = ("object", parse_body(body), extends)
            else:
                decls.setdefault("class " + name, ("object", parse_body(body), []))
            pos = i
        else:
            end = text.index(";", m.end())
            decls.setdefault(name, ("alias", text[m.end():end].strip()))
            pos = end + 1
    return decls, imports


class Converter:
    def __init__(self, kt_root, po_root):
        self.kt_root, self.po_root = kt_root, po_root
        self.modules = {}
        self.definitions = {}

    def module(self, key):
        if key not in self.modules:
            if key.startswith("po:"):
                path = os.path.join(self.po_root, "monitoring.coreos.com/v1",
                                    key[3:] + ".d.ts")
            else:
                path = os.path.join(self.kt_root, key + ".d.ts")
            with open(path) as f:
                self.modules[key] = parse_module(f.read())
        return self.modules[key]

    def resolve(self, module, name):
        """(module, local name) a type name in `module` refers to."""
        decls, imports = self.module(module)
        if name in decls:
            return module, name
        if name.startswith("IIoK8s"):  # kubernetes-models' names, from PO files
            for prefix, target in (("IIoK8sApiCoreV1", "core/v1"),
                                   ("IIoK8sApimachineryPkgApisMetaV1", "meta/v1"),
                                   ("IIoK8sApimachineryPkgApiResource", "api/resource"),
                                   ("IIoK8sApiAppsV1", "apps/v1")):
                if name.startswith(prefix):
                    return target, name[len(prefix):]
            if name == "IIoK8sApimachineryPkgUtilIntstrIntOrString":
                return None, "IntOrString"
        if name.startswith("I" + PO_PREFIX[1:]):
            return "po:" + name[len(PO_PREFIX):], "I" + name[len(PO_PREFIX):]
        source = imports.get(name)
        if source is None:
            raise KeyError(f"{module}: unknown type {name}")
        target = os.path.normpath(os.path.join(os.path.dirname(module), source))
        return target, name

    def ref(self, module, name):
        module, name = self.resolve(module, name)
        if module is None:
            return {"anyOf": [{"type": "string"}, {"type": "integer"}]}
        if module.startswith("po:"):
            key = "monitoring.v1." + module[3:]
        else:
            key = f"{module}.{name}".replace("/", ".")
        if key not in self.definitions:
            self.definitions[key] = None  # cycles stop here
            self.definitions[key] = self.declaration(module, name)
        return {"$ref": "#/definitions/" + key}

    def declaration(self, module, name):
        if (module, name) == ("api/resource", "Quantity"):
            # A string in the declarations, but the API takes 1 as well as "1"
            # (x-kubernetes-int-or-string in the OpenAPI it was made from).
            return {"anyOf": [{"type": "string"}, {"type": "number"}]}
        decls, _ = self.module(module)
        decl = decls[name]
        if decl[0] == "alias":
            return self.type(module, decl[1])
        fields = dict(decl[1])
        # A PO class lists its interface's inherited fields too.
        cls = decls.get("class " + name[1:]) if module.startswith("po:") else None
        if cls:
            fields = dict(cls[1])
        for base in [] if cls else decl[2]:
            base_module, base_name = self.resolve(module, base)
            fields.update(self.module(base_module)[0][base_name][1])
        if not fields:
            return {"type": "object"}
        return {
            "type": "object",
            "properties": {k: self.type(module, t) for k, (t, _) in sorted(fields.items())},
            "required": sorted(k for k, (_, req) in fields.items() if req),
            "additionalProperties": False,
        }

    def type(self, module, text):
        text = text.strip()
        alternatives = split_top(text, "|")
        if len(alternatives) > 1:
            if all(re.fullmatch(r'"[^"]*"', a) for a in alternatives):
                return {"enum": [json.loads(a) for a in alternatives]}
            return {"anyOf": [self.type(module, a) for a in alternatives]}
        if re.fullmatch(r'"[^"]*"', text):
            return {"enum": [json.loads(text)]}
        simple = {"string": {"type": "string"}, "number": {"type": "number"},
                  "boolean": {"type": "boolean"}, "any": {}, "unknown": {},
                  "object": {"type": "object"}}
        if text in simple:
            return simple[text]
        m = re.fullmatch(r"Array<(.+)>", text, flags=re.S) or re.fullmatch(
            r"(.+)\[\]", text, flags=re.S)
        if m:
            return {"type": "array", "items": self.type(module, m.group(1))}
        m = re.fullmatch(r"\{\s*\[\s*\w+\s*:\s*string\s*\]\s*:\s*(.+?);?\s*\}",
                         text, flags=re.S)
        if m:
            return {"type": "object",
                    "additionalProperties": self.type(module, m.group(1))}
        if re.fullmatch(r"[A-Za-z0-9_]+", text):
            return self.ref(module, text)
        raise ValueError(f"{module}: cannot convert type {text!r}")


def main():
    kt_root, po_root = sys.argv[1], sys.argv[2]
    with open(os.path.join(kt_root, "package.json")) as f:
        kt_version = json.load(f)["version"]
    with open(os.path.join(po_root, "package.json")) as f:
        po_version = json.load(f)["version"]
    out = os.path.join(HERE, "schemas")
    os.makedirs(out, exist_ok=True)
    for filename, source, kinds, convert in (
        (f"kubernetes-{kt_version}.json", f"kubernetes-types@{kt_version}",
         K8S_KINDS, lambda c, v: c.ref(*v)),
        (f"prometheus-operator-{po_version}.json",
         f"@kubernetes-models/prometheus-operator@{po_version}", PO_KINDS,
         lambda c, v: c.ref("po:" + v, "I" + v)),
    ):
        converter = Converter(kt_root, po_root)
        kind_refs = {k: convert(converter, v) for k, v in sorted(kinds.items())}
        document = {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "description": f"Generated by tests/deploy/vendor_schemas.py from the npm "
                           f"package {source}; do not edit.",
            "kinds": kind_refs,
            "definitions": dict(sorted(converter.definitions.items())),
        }
        with open(os.path.join(out, filename), "w") as f:
            json.dump(document, f, indent=1, sort_keys=False)
            f.write("\n")
        print(f"{filename}: {len(kind_refs)} kinds, "
              f"{len(converter.definitions)} definitions")


if __name__ == "__main__":
    main()
