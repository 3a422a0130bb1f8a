#!/usr/bin/env python3
"""Import cycles between the files of a crate, from crate:: and super:: paths (text only)."""
import os, re, sys
src = sys.argv[1]
mods = {}  # module path tuple -> file
for dp, _, fs in os.walk(src):
    for f in fs:
        if not f.endswith('.rs'): continue
        p = os.path.join(dp, f)
        rel = os.path.relpath(p, src)[:-3].split(os.sep)
        if rel == ['lib'] or rel == ['main']: mod = ()
        elif rel[-1] == 'mod': mod = tuple(rel[:-1])
        else: mod = tuple(rel)
        if 'bin' in rel[:1]: continue
        mods[mod] = p
# re-exports: `pub use a::b::{X, Y};` in a module file makes mod::X point at a::b
reexp = {}
for mod, p in mods.items():
    text = open(p).read()
    for m in re.finditer(r'pub use ([a-z_:]+)::\{([^}]*)\}', text):
        base = [x for x in m.group(1).split('::') if x]
        if base and base[0] == 'crate': base = base[1:]
        elif base and base[0] == 'self': base = list(mod) + base[1:]
        else: base = list(mod) + base
        for name in re.split(r'[,\s]+', m.group(2)):
            name = name.strip()
            if name: reexp[mod + (name.split(' as ')[-1],)] = tuple(base)
    for m in re.finditer(r'pub use ([a-z_:]+)::([A-Za-z_][A-Za-z0-9_]*);', text):
        base = [x for x in m.group(1).split('::') if x]
        if base and base[0] == 'crate': base = base[1:]
        else: base = list(mod) + base
        reexp[mod + (m.group(2),)] = tuple(base)
def resolve(path, depth=0):
    for i in range(len(path), -1, -1):
        key = tuple(path[:i])
        # a re-export that names itself (`pub use self::x::X` seen from x) ends the chase
        if key in reexp and depth < 20 and tuple(reexp[key]) != key[:-1]:
            return resolve(list(reexp[key]) + list(path[i:]), depth + 1)
        if key in mods: return key
    return ()
edges = {m: set() for m in mods}
pat = re.compile(r'\b(crate|super)((?:::(?:super|[A-Za-z_][A-Za-z0-9_]*))*)(::\{)?')
for mod, p in mods.items():
    text = open(p).read()
    # drop comments and tests modules roughly
    text = re.sub(r'//[^\n]*', '', text)
    if '#[cfg(test)]' in text:
        text = text[:text.index('#[cfg(test)]')]
    for m in pat.finditer(text):
        head, tail = m.group(1), [x for x in m.group(2).split('::') if x]
        if head == 'crate':
            target = list(tail)
        else:
            base = list(mod)
            # super from a file module: parent module
            base = base[:-1]
            while tail and tail[0] == 'super':
                base = base[:-1]; tail = tail[1:]
            target = base + tail
        t = resolve(target)
        if t != mod: edges[mod].add(t)
# tarjan
index = {}; low = {}; stack = []; on = set(); sccs = []; i = [0]
sys.setrecursionlimit(10000)
def sc(v):
    index[v] = low[v] = i[0]; i[0] += 1; stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: sccs.append(comp)
for v in mods:
    if v not in index: sc(v)
name = lambda m: '::'.join(m) or 'lib'
for c in sccs:
    print('cycle:', ', '.join(sorted(name(m) for m in c)))
    for m in c:
        print('   ', name(m), '->', ', '.join(sorted(name(t) for t in edges[m] if t in c)))
print(len(sccs), 'cycles')
