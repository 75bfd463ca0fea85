// The online softmax of one row, block by block: a port of running_states in
// figures/softmax_blocks.py (lesson 5's softmax states); the tests run both on the same rows.
function onlineSoftmax(scores, values, block) {
  const safe = (m) => (m === -Infinity ? 0 : m);
  let m = -Infinity, l = 0, o = 0;
  const steps = [];
  for (let start = 0; start < scores.length; start += block) {
    const s = scores.slice(start, start + block), v = values.slice(start, start + block);
    // the block's own state (m, l, o), against its safe max
    const bm = Math.max(...s);
    let bl = 0, bo = 0;
    s.forEach((x, i) => { const p = Math.exp(x - safe(bm)); bl += p; bo += p * v[i]; });
    // merged with the running state, both rescaled to the common max
    const top = Math.max(m, bm);
    const old = Math.exp(m - safe(top)), fresh = Math.exp(bm - safe(top));
    l = old * l + fresh * bl;
    o = old * o + fresh * bo;
    m = top;
    steps.push({start, end: start + s.length, m, l, o, out: l === 0 ? 0 : o / l});
  }
  return steps;
}
