// The start form: the seats a person can take depend on the protocol chosen.
(function () {
  const protocol = document.getElementById("protocol");
  const seat = document.getElementById("seat");
  if (!protocol || !seat) return;
  const seats = JSON.parse(seat.dataset.seats || "{}");
  protocol.addEventListener("change", () => {
    seat.replaceChildren(new Option("Watch only", ""));
    (seats[protocol.value] || []).forEach((name) => seat.add(new Option(name, name)));
  });
})();
