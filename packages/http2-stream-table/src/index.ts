export { StreamTable, installStreamTable } from './stream-table.js';
