// BENCH ONLY (never exported, never deployed): the shipped Worker with index reports
// disabled, the baseline the cost of reporting is measured against. `python -m bench`
// copies the shipped Worker's modules beside this file and runs this one in its place.
import worker, { LockIndex, LockObject as ShippedLockObject } from "./index.js";

export { LockIndex };

export class LockObject extends ShippedLockObject {
  async deliver() {
    // No report: the lock path alone.
  }
}

export default worker;
