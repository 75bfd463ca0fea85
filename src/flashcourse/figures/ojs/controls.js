// Controls built from plain HTML (Observable's Inputs library would load from a CDN). Each is a
// <label> whose value is the option chosen, set before the input event bubbles up to OJS.
const control = (label, field, shown, read) => {
  const view = document.createElement("label");
  view.className = "fc-control";
  view.append(label + " ", field, " ", shown);
  const update = () => { view.value = read(); };
  field.addEventListener("input", update);
  update();
  return view;
};
// A range input over a list of values; the value shown beside it.
const slider = (label, values, start) => {
  const field = document.createElement("input");
  Object.assign(field, {type: "range", min: 0, max: values.length - 1, step: 1});
  field.value = start;
  const shown = document.createElement("output");
  return control(label, field, shown, () => {
    shown.textContent = values[+field.value];
    return values[+field.value];
  });
};
// A drop-down list of names; its value is the index chosen.
const choice = (label, names, start) => {
  const field = document.createElement("select");
  names.forEach((name, index) => field.add(new Option(name, index, false, index === start)));
  return control(label, field, "", () => +field.value);
};
// A line of text.
const textbox = (label, start) => {
  const field = document.createElement("input");
  Object.assign(field, {type: "text", value: start, size: 40});
  return control(label, field, "", () => field.value);
};
